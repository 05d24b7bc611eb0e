//! The POSIX sh scripts that run on the remote side (an ssh host or a container), and the
//! markers they print on stderr so talaria can tell the transport's failure (no
//! `__talaria_started`: the script never ran — degraded) from the command's own result
//! (`__talaria_end <code> <cwd>`).

use crate::engine::jobs::sh_quote;

pub(crate) const STARTED: &str = "__talaria_started";
pub(crate) const END: &str = "__talaria_end";

/// What the markers on a transport's stderr say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Markers {
    /// The remote script ran (the connection worked).
    pub(crate) started: bool,
    /// The command's exit code, once it ended and the script said so.
    pub(crate) end: Option<i32>,
    /// The command's final working directory on the remote side.
    pub(crate) cwd: Option<String>,
}

pub(crate) fn markers(stderr: &str) -> Markers {
    let mut m = Markers::default();
    for line in stderr.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with(STARTED) {
            m.started = true;
        } else if let Some(rest) = line.strip_prefix(END) {
            let rest = rest.trim_start();
            let (code, cwd) = rest.split_once(' ').unwrap_or((rest, ""));
            m.end = code.trim().parse().ok().or(Some(-1));
            m.cwd = Some(cwd.to_string()).filter(|c| !c.is_empty());
        }
    }
    m
}

/// stderr without the marker lines.
pub(crate) fn strip_markers(stderr: &str) -> String {
    stderr.lines().filter(|l| !l.starts_with(STARTED) && !l.starts_with(END)).collect::<Vec<_>>().join("\n")
}

/// A short script wrapped so its end is known: started marker, the script in a subshell,
/// end marker with its status.
pub(crate) fn marked(script: &str) -> String {
    format!("echo {STARTED} >&2\n( {script}\n)\n__s=$?\necho \"{END} $__s\" >&2\nexit $__s\n")
}

/// `~/x` → `"$HOME"/'x'`; anything else quoted as is.
pub(crate) fn remote_path_expr(path: &str) -> String {
    if path == "~" {
        "\"$HOME\"".to_string()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("\"$HOME\"/{}", sh_quote(rest))
    } else {
        sh_quote(path)
    }
}

/// The job directory of a remote job, as a shell expression.
pub(crate) fn job_dir_expr(remote_dir: &str, tag: &str) -> String {
    format!("{}/{}", remote_path_expr(remote_dir.trim_end_matches('/')), sh_quote(tag))
}

/// The wrapper that runs under `setsid` on the remote side: records its pid (= its process
/// group), runs the command in the working directory with the chosen shell, records the
/// exit status. Arguments: job dir, shell, cwd.
const WRAPPER: &str = r#"d=$1; S=$2; C=$3
echo $$ > "$d/pid"
(
  case $C in "~") C=$HOME ;; "~/"*) C=$HOME/${C#"~/"} ;; esac
  if [ -n "$C" ]; then cd "$C" || exit 1; fi
  __TALARIA_D=$d; export __TALARIA_D
  exec "$S" "$d/script"
)
echo $? > "$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"
"#;

/// Start a remote job and follow it: the job runs detached (`setsid`, double-forked so it is
/// no child of this script) with its log, pid, exit record and stdin FIFO in `dir`; this
/// script streams the log to stdout until the job ends, relays stdin into the FIFO for a
/// background job, prints the end marker (exit code and final cwd) on stderr, removes the
/// job directory and exits with the job's code.
pub(crate) fn start_script(dir_expr: &str, command: &str, cwd: &str, background: bool, shell: &str) -> String {
    let script_body = format!("trap 'pwd -P > \"$__TALARIA_D/cwd\" 2>/dev/null' EXIT\n{command}\n");
    let bg = if background { "1" } else { "0" };
    format!(
        r#"d={dir_expr}
BG={bg}
mkdir -p "$d" || {{ echo "talaria: cannot create the remote job directory $d" >&2; exit 1; }}
printf '%s' {body} > "$d/script" || exit 1
if command -v {shell} >/dev/null 2>&1; then S={shell}; else S=sh; fi
if [ "$BG" = 1 ]; then rm -f "$d/stdin"; mkfifo "$d/stdin" || exit 1; IN=$d/stdin; else IN=/dev/null; fi
( setsid sh -c {wrapper} sh "$d" "$S" {cwd} < "$IN" > "$d/log" 2>&1 & )
if [ "$BG" = 1 ]; then exec 3<&0; cat <&3 > "$d/stdin" 2>/dev/null & CATPID=$!; fi
exec 0</dev/null
{follow}"#,
        body = sh_quote(&script_body),
        shell = sh_quote(shell),
        wrapper = sh_quote(WRAPPER),
        cwd = sh_quote(cwd),
        follow = FOLLOW,
    )
}

/// Wait for the pid, stream the log until the job ends, then report. Expects `d`, `BG` and
/// (for BG=1) `CATPID`.
const FOLLOW: &str = r#"i=0; pid=
while [ -z "$pid" ]; do
  read -r pid < "$d/pid" 2>/dev/null
  [ -n "$pid" ] && break
  i=$((i+1))
  if [ $i -gt 5000 ]; then echo "talaria: the remote job did not start" >&2; exit 1; fi
  sleep 0.002
done
echo "__talaria_started $pid" >&2
# The job is not our child and a container's init may be slow to reap it: its end is the
# exit record (or a kill), not its pid. A watcher child (which we reap) ends when it appears.
( n=0; t=0.005
  while [ ! -f "$d/exit" ] && [ ! -f "$d/killed" ] && kill -0 "$pid" 2>/dev/null; do
    sleep $t; n=$((n+1)); [ $n -gt 100 ] && t=0.05
  done ) &
W=$!
# GNU tail follows until the watcher ends; elsewhere (busybox) a polling loop.
if ! tail -c +1 -f --pid="$W" -s 0.01 "$d/log" 2>/dev/null; then
  off=0
  while :; do
    alive=0; kill -0 "$W" 2>/dev/null && alive=1
    size=$(wc -c < "$d/log" | tr -d ' ')
    if [ "$size" -gt "$off" ]; then tail -c +$((off+1)) "$d/log" | head -c $((size-off)); off=$size; fi
    [ $alive = 0 ] && break
    sleep 0.1
  done
fi
wait "$W" 2>/dev/null
if [ ! -f "$d/exit" ] && [ ! -f "$d/killed" ] && kill -0 "$pid" 2>/dev/null; then
  echo "talaria: lost the output stream of the remote job" >&2
  exit 255
fi
code=137; cwd=
[ -f "$d/exit" ] && read -r code < "$d/exit"
[ -f "$d/cwd" ] && read -r cwd < "$d/cwd"
echo "__talaria_end $code $cwd" >&2
if [ "$BG" = 1 ]; then kill "$CATPID" 2>/dev/null; fi
rm -rf "$d" &
exit "$code"
"#;

/// Kill a remote job's process group: SIGTERM, up to `grace_s`, SIGKILL, then wait (up to
/// 10 s) until none of it is left.
pub(crate) fn kill_script(dir_expr: &str, grace_s: f64) -> String {
    let ticks = (grace_s.max(0.0) * 20.0).ceil() as u64;
    format!(
        r#"d={dir_expr}
[ -s "$d/pid" ] || exit 0
[ -f "$d/exit" ] && exit 0
read -r pid < "$d/pid"
: > "$d/killed"
# A live (non-zombie) member of the group: /proc where there is one (an unreaped zombie
# leader must not count), else kill -0.
alive() {{
  if [ -r /proc/self/stat ]; then
    for s in /proc/[0-9]*/stat; do
      read -r l < "$s" 2>/dev/null || continue
      r=${{l##*) }}
      set -- $r
      [ "$1" != Z ] && [ "$3" = "$pid" ] && return 0
    done
    return 1
  fi
  kill -0 -"$pid" 2>/dev/null
}}
kill -TERM -"$pid" 2>/dev/null || exit 0
i=0
while alive && [ $i -lt {ticks} ]; do sleep 0.05; i=$((i+1)); done
kill -KILL -"$pid" 2>/dev/null
i=0
while alive && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
exit 0
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_parsed_and_stripped() {
        let err = "warning: x\n__talaria_started 123\n__talaria_end 3 /tmp/a b\n";
        let m = markers(err);
        assert!(m.started);
        assert_eq!(m.end, Some(3));
        assert_eq!(m.cwd.as_deref(), Some("/tmp/a b"));
        assert_eq!(strip_markers(err), "warning: x");
        assert_eq!(markers("ssh: connect to host x: Connection refused"), Markers::default());
    }

    #[test]
    fn remote_paths() {
        assert_eq!(remote_path_expr("~/.cache/t"), "\"$HOME\"/'.cache/t'");
        assert_eq!(remote_path_expr("/var/t"), "'/var/t'");
        assert_eq!(job_dir_expr("~/j/", "job_1-ab"), "\"$HOME\"/'j'/'job_1-ab'");
    }

    /// The scripts run under a real `sh` (dash on Debian): a start runs the command, relays
    /// output, exit code and cwd, and cleans up.
    #[test]
    fn start_script_runs_locally_under_sh() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("j");
        let script = start_script(&sh_quote(&dir.to_string_lossy()), "echo hi; cd /; exit 7", "/tmp", false, "bash");
        let out = std::process::Command::new("sh").arg("-c").arg(&script).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        assert_eq!(out.status.code(), Some(7));
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert!(m.started);
        assert_eq!(m.end, Some(7));
        assert_eq!(m.cwd.as_deref(), Some("/"));
        assert!(!dir.exists(), "the remote job directory is removed");
    }
}
