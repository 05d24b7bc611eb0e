#!/usr/bin/env bash
# Benchmark Talaria against its peers (Codex CLI, Claude Code) in a pseudo-terminal.
#
#   scripts/bench-peers.sh [--no-talaria] [pty_bench options...]
#
# Installs the peers from the npm registry into a temporary directory (removed on exit; nothing
# lands in the repository), then runs `cargo bench --bench pty_bench` with Talaria and every peer
# that installed, and prints the Markdown report. Options after ours go to pty_bench, e.g.
#   scripts/bench-peers.sh --runs 20 --idle-secs 10 --out results.md
#
# Environment:
#   PEERS_DIR=/path          reuse (or create and keep) an npm prefix instead of a temporary one
#   PEER_INSTALL_TIMEOUT=300 seconds allowed for each peer's npm install
#
# Peers run without credentials, so their first frame is their sign-in / onboarding screen; the
# report says so. Talaria runs with no API key, so it uses its built-in demo model. Codex CLI's
# first start in a fresh HOME also installs its app-server daemon there; pass --reuse-home to
# measure later starts instead (one unmeasured warm-up run, then the same HOME for every run).
#
# With --keystrokes N (e.g. `scripts/bench-peers.sh --runs 3 --keystrokes 50`) every program is
# instead pointed at pty_bench's scripted model server on 127.0.0.1 (Codex through a custom
# provider in a temporary CODEX_HOME, Claude Code through ANTHROPIC_BASE_URL and a prepared
# ~/.claude.json, Talaria through --base-url) and the report gives keystroke-to-screen latency
# while each streams the same answer; nothing reaches the network.
set -euo pipefail
cd "$(dirname "$0")/.."

with_talaria=1
if [ "${1:-}" = "--no-talaria" ]; then
  with_talaria=0
  shift
fi

if [ -n "${PEERS_DIR:-}" ]; then
  prefix="$PEERS_DIR"
  mkdir -p "$prefix"
else
  prefix="$(mktemp -d "${TMPDIR:-/tmp}/talaria-peers.XXXXXX")"
  trap 'rm -rf "$prefix"' EXIT
fi
timeout_secs="${PEER_INSTALL_TIMEOUT:-300}"

# --keystrokes N (N > 0) among the pty_bench options: the streaming keystroke measurement.
keys=0
prev=""
for a in "$@"; do
  case "$a" in
    --keystrokes=*) [ "${a#--keystrokes=}" != 0 ] && keys=1 ;;
    *) [ "$prev" = --keystrokes ] && [ "$a" != 0 ] && keys=1 ;;
  esac
  prev="$a"
done

# install PACKAGE: 0 when PACKAGE is (already) installed under $prefix.
install() {
  local pkg="$1"
  if [ -f "$prefix/node_modules/$pkg/package.json" ]; then
    return 0
  fi
  if ! command -v npm >/dev/null; then
    echo "bench-peers: npm is not installed; skipping $pkg" >&2
    return 1
  fi
  echo "bench-peers: npm install $pkg into $prefix ..." >&2
  if ! timeout "$timeout_secs" npm install --prefix "$prefix" --no-audit --no-fund "$pkg" >"$prefix/npm-$$.log" 2>&1; then
    echo "bench-peers: installing $pkg failed; skipping it. npm said:" >&2
    tail -n 15 "$prefix/npm-$$.log" >&2
    return 1
  fi
}

version() {
  node -p "require(process.argv[1]).version" "$prefix/node_modules/$1/package.json" 2>/dev/null || echo "?"
}

args=()
if [ "$with_talaria" = 1 ]; then
  if [ "$keys" = 1 ]; then
    args+=(--program talaria --note "talaria=the release build, on the scripted server through --base-url")
  else
    args+=(--program talaria --note "talaria=no API key: the built-in demo model")
  fi
fi

if install @openai/codex; then
  # The Node launcher users run; it starts the native binary, and both count.
  codex="$prefix/node_modules/.bin/codex"
  args+=(--program "codex=$codex"
    --note "codex=@openai/codex $(version @openai/codex) from npm, started through its Node launcher")
  if [ "$keys" = 0 ]; then
    args+=(--note "codex=no credentials: it opens on its sign-in screen (a fresh HOME also installs its app-server daemon first)")
  fi
fi

if install @anthropic-ai/claude-code; then
  claude="$prefix/node_modules/.bin/claude"
  # The postinstall step puts the native binary over a small stub; if it did not run, use the
  # platform package's binary directly.
  if [ "$(stat -L -c %s "$claude" 2>/dev/null || echo 0)" -lt 4096 ]; then
    claude="$(find "$prefix/node_modules/@anthropic-ai" -mindepth 2 -maxdepth 2 -type f -name claude -size +1M | head -n 1)"
  fi
  if [ -n "$claude" ]; then
    v="@anthropic-ai/claude-code $(version @anthropic-ai/claude-code) from npm"
    args+=(--program "claude=$claude" --note "claude=$v")
    # With --keystrokes, pty_bench's claude driver writes ~/.claude.json itself (onboarding, key,
    # folder trust), so the onboarded twin would only repeat it.
    if [ "$keys" = 0 ]; then
      args+=(--note "claude=no credentials: its first frame is the onboarding (welcome / theme) screen")
      # Offline, Claude Code exits right after that screen when it cannot reach its API, which
      # leaves no RSS or idle figures; with onboarding marked done it shows the folder-trust
      # dialog instead and stays, so this second entry measures a running Claude Code.
      args+=(--program "claude-onboarded=$claude"
        --home-file 'claude-onboarded:.claude.json={"hasCompletedOnboarding":true,"theme":"dark"}'
        --note "claude-onboarded=$v"
        --note "claude-onboarded=no credentials, onboarding marked done: its first frame is the folder-trust dialog")
    fi
  else
    echo "bench-peers: @anthropic-ai/claude-code installed but no claude binary was found; skipping it" >&2
  fi
fi

if [ ${#args[@]} -eq 0 ]; then
  echo "bench-peers: nothing to measure" >&2
  exit 1
fi

export PTY_BENCH_INVOKED_AS="scripts/bench-peers.sh $*"
# Not `exec`: the EXIT trap must still remove the temporary prefix.
cargo bench --bench pty_bench -- "${args[@]}" "$@"
