"""The colour theme: the seed's classes mapped to urwid palette entries.

===================  =====================  ===========================================
seed class           palette entry          what is drawn with it
===================  =====================  ===========================================
``syntax.keyword``   ``keyword``            a speaker's name
``syntax.comment``   ``comment``            a thought (label and text)
``syntax.type``      ``type``               a tool call's line and its status
``diagnostic.error`` ``error``              a failed tool call, the client's notices
``editor.selection`` ``selection``          selected lines, and the cursor bar
===================  =====================  ===========================================

Code in fenced blocks uses the ``code.*`` entries (:data:`TOKEN_CLASSES` maps Pygments
token types onto them); diffs use ``diff.*``.
"""

from __future__ import annotations

from pygments.token import (
    Comment,
    Error,
    Generic,
    Keyword,
    Literal,
    Name,
    Number,
    Operator,
    String,
    _TokenType,
)

__all__ = ["PALETTE", "TOKEN_CLASSES", "token_attribute"]

#: Seed class -> palette entry name.
SEED_CLASSES = {
    "syntax.keyword": "keyword",
    "syntax.comment": "comment",
    "syntax.type": "type",
    "diagnostic.error": "error",
    "editor.selection": "selection",
}

#: (name, foreground, background, mono, foreground high, background high).
PALETTE: list[tuple[str, ...]] = [
    ("body", "light gray", "black"),
    ("keyword", "light cyan,bold", "black"),
    ("comment", "dark gray", "black"),
    ("type", "yellow", "black"),
    ("error", "light red,bold", "black"),
    ("selection", "black", "light gray"),
    ("cursor", "black", "light cyan"),
    ("code", "light gray", "black"),
    ("code.keyword", "light magenta", "black"),
    ("code.string", "light green", "black"),
    ("code.comment", "dark gray", "black"),
    ("code.number", "light blue", "black"),
    ("code.name", "light cyan", "black"),
    ("code.operator", "yellow", "black"),
    ("diff.add", "light green", "black"),
    ("diff.del", "light red", "black"),
    ("diff.hunk", "light cyan", "black"),
    ("fence", "dark gray", "black"),
    ("rule", "dark cyan", "black"),
    ("spinner", "yellow,bold", "black"),
    ("title", "light gray", "dark blue"),
    ("title.front", "white,bold", "dark blue"),
    ("menu", "black", "light gray"),
    ("menu.focus", "white", "dark blue"),
    ("menu.disabled", "dark gray", "light gray"),
    ("status", "black", "dark cyan"),
    ("status.message", "white,bold", "dark cyan"),
    ("modal", "black", "light gray"),
    ("modal.title", "white,bold", "dark red"),
    ("button", "black", "light gray"),
    ("button.focus", "white,bold", "dark blue"),
    ("list", "black", "light gray"),
    ("list.focus", "white", "dark blue"),
    ("input", "white", "black"),
]

#: Pygments token type -> palette entry, most specific first.
TOKEN_CLASSES: list[tuple[_TokenType, str]] = [
    (Comment, "code.comment"),
    (Keyword, "code.keyword"),
    (Name.Tag, "code.keyword"),
    (Name.Builtin, "code.name"),
    (Name.Function, "code.name"),
    (Name.Class, "code.name"),
    (Name.Attribute, "code.name"),
    (String, "code.string"),
    (Literal.String, "code.string"),
    (Number, "code.number"),
    (Operator, "code.operator"),
    (Generic.Heading, "code.keyword"),
    (Generic.Subheading, "code.keyword"),
    (Generic.Emph, "code.name"),
    (Generic.Strong, "code.name"),
    (Generic.Inserted, "diff.add"),
    (Generic.Deleted, "diff.del"),
    (Error, "code"),
]


def token_attribute(token: _TokenType) -> str:
    """The palette entry for a Pygments ``token`` (``code`` when none is more specific)."""
    for kind, attribute in TOKEN_CLASSES:
        if token in kind:
            return attribute
    return "code"
