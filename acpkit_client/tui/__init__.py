"""The reference client's full-screen terminal UI (urwid on the Twisted reactor).

It only draws the client library's models (:mod:`acpkit_client.session`,
:mod:`acpkit_client.conversation`) and sends their actions. Entry point:
:func:`acpkit_client.tui.app.main`.
"""
