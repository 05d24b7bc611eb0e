//! The POSIX sh scripts that run on the remote side (an ssh host or a container), and the
//! markers they print on stderr so talaria can tell the transport's failure (no
//! `__talaria_started`: the script never ran — degraded) from the command's own result
//! (`__talaria_end <code> <cwd>`).
//!
//! A remote job's files sit side by side in `remote_dir`, named after its tag (`<tag>.log`,
//! `.pid`, `.exit`, `.cwd`, `.stdin`, `.killed`, `.follower`, `.bell`): no directory to
//! create per command. The scripts are written for few processes per command (DESIGN §4b,
//! BENCHMARKS "Remote backends"): the follower starts the job as its own child (so `wait`
//! has its end at once). A command that ends within 50 ms is not followed at all: its log
//! is printed once it ended (an inotify instance, as `tail -f` makes, takes ~5 ms to tear
//! down). A longer one is streamed with GNU `tail -f --pid` (inotify), started when the
//! watchdog's USR1 interrupts the follower's `wait`. tail looks for the job's end only when
//! woken, so once `wait` returns the follower truncates the empty `.bell` that tail also
//! follows: that wakes it at once, it finds the job gone and exits — no polling interval on
//! the path of a command. Only the rarely taken paths (re-attach, kill, a host without GNU
//! tail) poll with `sleep`.

use crate::engine::process::sh_quote;

pub(crate) const STARTED: &str = "__talaria_started";
pub(crate) const END: &str = "__talaria_end";
/// Printed by the attach script when the job cannot be followed any more (its files are
/// gone, or it ended without an exit record); the rest of the line says why.
pub(crate) const GONE: &str = "__talaria_gone";

/// What the markers on a transport's stderr say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Markers {
    /// The remote script ran (the connection worked).
    pub(crate) started: bool,
    /// The command's exit code, once it ended and the script said so.
    pub(crate) end: Option<i32>,
    /// The command's final working directory on the remote side.
    pub(crate) cwd: Option<String>,
    /// The job cannot be followed any more: why.
    pub(crate) gone: Option<String>,
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
        } else if let Some(rest) = line.strip_prefix(GONE) {
            m.gone = Some(rest.trim().to_string());
        }
    }
    m
}

/// stderr without the marker lines.
pub(crate) fn strip_markers(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with(STARTED) && !l.starts_with(END) && !l.starts_with(GONE))
        .collect::<Vec<_>>()
        .join("\n")
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

/// The path prefix of a remote job's files (`<remote_dir>/<tag>`), as a shell expression.
/// Public for `examples/ssh_overhead` (it times the start script alone).
pub fn job_dir_expr(remote_dir: &str, tag: &str) -> String {
    format!("{}/{}", remote_path_expr(remote_dir.trim_end_matches('/')), sh_quote(tag))
}

/// The wrapper that runs under `setsid` on the remote side, in its own process group, with
/// the command's own shell (bash, or sh where there is none): goes to the working
/// directory, runs the command in a subshell (a fork, no second shell to exec), records the
/// exit status. Arguments: file prefix, cwd, command.
const WRAPPER: &str = r#"__td=$1; __tc=$2; __tb=$3; set --
case $__tc in "~") __tc=$HOME ;; "~/"*) __tc=$HOME/${__tc#"~/"} ;; esac
if [ -n "$__tc" ]; then cd "$__tc" || { echo 1 > "$__td.exit"; exit 1; }; fi
__TALARIA_D=$__td; export __TALARIA_D
( eval "$__tb" )
__tr=$?
echo $__tr > "$__td.exit"
exit $__tr
"#;

/// Start a remote job and follow it: the job runs detached (`setsid`, its own session and
/// group, so a dropped connection does not touch it) with its log, pid, exit record and
/// stdin FIFO next to each other under `prefix`; this script streams the log to stdout
/// until the job ends, relays stdin into the FIFO for a background job, prints the end
/// marker (exit code and final cwd) on stderr, removes the job's files and exits with the
/// job's code. Public for `examples/ssh_overhead`.
///
/// `lease_s`: a watchdog (a subshell of this script, outside the job's group, which outlives
/// a dropped connection) kills the job's group when talaria has not renewed `<prefix>.lease`
/// for that long (`lease_script`) — talaria gone and the host unreachable when its grace
/// expired, so its own kill could not get there.
pub fn start_script(prefix: &str, command: &str, cwd: &str, background: bool, shell: &str, lease_s: u64) -> String {
    let body = format!("trap 'pwd -P > \"$__TALARIA_D.cwd\" 2>/dev/null' EXIT\n{command}\n");
    let bg = if background { "1" } else { "0" };
    let lease_s = lease_s.max(2);
    let step = (lease_s / 5).clamp(1, 10);
    format!(
        r#"d={prefix}; r=${{d%/*}}; BG={bg}
[ -d "$r" ] || mkdir -p "$r" || {{ echo "talaria: cannot create the remote job directory $r" >&2; exit 1; }}
if command -v {shell} >/dev/null 2>&1; then S={shell}; else S=sh; fi
IN=/dev/null
if [ $BG = 1 ]; then rm -f "$d.stdin"; mkfifo "$d.stdin" || exit 1; IN=$d.stdin; fi
: > "$d.log" || exit 1
setsid "$S" -c {wrapper} talaria "$d" {cwd} {body} < "$IN" >> "$d.log" 2>&1 &
J=$!
echo $J > "$d.pid"
echo 0 > "$d.lease"
{tail_kind}
GO=0
if [ $GT = 1 ]; then trap 'GO=1' USR1; fi
( trap '' HUP; left={lease_s}; last=0
  # Not once the job has ended: its follower may be gone and its pid taken.
  if [ $GT = 1 ]; then sleep 0.05; [ -s "$d.exit" ] || kill -USR1 $$ 2>/dev/null; fi
  while sleep {step}; do
    [ -s "$d.exit" ] && exit 0
    kill -0 $J 2>/dev/null || exit 0
    n=; read -r n < "$d.lease"
    if [ "$n" != "$last" ]; then last=$n; left={lease_s}; continue; fi
    left=$((left - {step}))
    [ $left -gt 0 ] && continue
    echo "its remote lease expired: talaria did not reach it for {lease_s}s, so it was killed there" > "$d.killed"
    kill -TERM -$J 2>/dev/null; sleep 2; kill -KILL -$J 2>/dev/null; exit 0
  done ) </dev/null >/dev/null 2>&1 &
echo "{STARTED} $J" >&2
if [ $BG = 1 ]; then exec 3<&0; cat <&3 > "$d.stdin" 2>/dev/null & CATPID=$!; fi
exec 0</dev/null
if [ $GT = 1 ]; then
  # A command that ends within 50 ms (most do) is waited for and its log printed once: no
  # tail, whose inotify instance takes ~5 ms to tear down. A longer one is streamed: the
  # watchdog's USR1 interrupts the wait, and tail follows the log from its start.
  T=
  wait $J; code=$?
  while kill -0 $J 2>/dev/null; do
    if [ -z "$T" ]; then
      : > "$d.bell"
      tail -q -c +1 -f --pid=$J -s 1 "$d.log" "$d.bell" &
      T=$!
    fi
    wait $J; code=$?
  done
  # The exit record, not `wait`: a wait the signal interrupted just as the job ended may
  # have reaped it and still said 138.
  [ -s "$d.exit" ] && read -r code < "$d.exit"
  if [ -n "$T" ]; then
    : > "$d.bell"
    wait $T
  else
    cat "$d.log"
  fi
else
  off=0
  while :; do
    kill -0 $J 2>/dev/null && [ ! -s "$d.exit" ] && done=0 || done=1
{poll}
    [ $done = 1 ] && break
    sleep 0.1
  done
  wait $J; code=$?
fi
cwd=
[ -s "$d.cwd" ] && read -r cwd < "$d.cwd"
echo "{END} $code $cwd" >&2
if [ $BG = 1 ]; then kill $CATPID 2>/dev/null; fi
{orphaned}
# A follower that lost its connection leaves the files to the one that re-attaches.
# In the background, holding nothing of the connection's: sshd ends the session without it.
if [ ! -e "$d.follower" ] && ! orphaned; then
  rm -f "$d.log" "$d.pid" "$d.exit" "$d.cwd" "$d.stdin" "$d.killed" "$d.lease" "$d.bell" </dev/null >/dev/null 2>&1 &
fi
exit $code
"#,
        shell = sh_quote(shell),
        wrapper = sh_quote(WRAPPER),
        cwd = sh_quote(cwd),
        body = sh_quote(&body),
        tail_kind = TAIL_KIND,
        poll = POLL_LOG,
        orphaned = ORPHANED,
    )
}

/// `orphaned`: true when this script's parent (sshd's session, docker's exec) is gone, i.e.
/// its connection dropped (a builtin `kill -0`: reading /proc with `read` costs a syscall
/// per byte).
const ORPHANED: &str = r#"orphaned() {
  [ "${PPID:-0}" -gt 1 ] && ! kill -0 "$PPID" 2>/dev/null
}"#;

/// Sets `GT=1` where `tail` is GNU's (it has `--pid`), else 0; remembered in the remote
/// directory `r` so only the first command on a host asks.
const TAIL_KIND: &str = r#"if [ -f "$r/.tail-gnu" ]; then GT=1
elif [ -f "$r/.tail-posix" ]; then GT=0
elif tail --pid=$$ -c 0 /dev/null >/dev/null 2>&1; then GT=1; : > "$r/.tail-gnu"
else GT=0; : > "$r/.tail-posix"; fi"#;

/// One polling step without GNU tail: print what the log gained since byte `off`.
const POLL_LOG: &str = r#"    size=$(wc -c < "$d.log" | tr -d ' ')
    if [ "$size" -gt "$off" ]; then tail -c +$((off+1)) "$d.log" | head -c $((size-off)); off=$size; fi"#;

/// Re-attach to a running remote job after the connection dropped: `$1` is how many bytes
/// of its log talaria already has. Streams the rest of the log until the job ends, then
/// the end marker; `__talaria_gone <why>` when its files are gone or it ended without an
/// exit record.
pub(crate) fn attach_script(prefix: &str) -> String {
    format!(
        r#"d={prefix}; r=${{d%/*}}; OFF=${{1:-0}}
if [ ! -s "$d.pid" ] || [ ! -f "$d.log" ]; then
  echo "{GONE} the remote job's files are gone from $r" >&2; exit 1
fi
read -r pid < "$d.pid"
echo $$ > "$d.follower"
echo "{STARTED} $pid" >&2
CATPID=
if [ -p "$d.stdin" ]; then exec 3<&0; cat <&3 > "$d.stdin" 2>/dev/null & CATPID=$!; fi
exec 0</dev/null
# The job is not our child: its end is the exit record (or a kill, or its pid gone).
( while [ ! -s "$d.exit" ] && [ ! -f "$d.killed" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done ) &
W=$!
{tail_kind}
if [ $GT = 1 ]; then
  tail -c +$((OFF+1)) -f --pid=$W -s 0.2 "$d.log"
else
  off=$OFF
  while :; do
    kill -0 $W 2>/dev/null && done=0 || done=1
{poll}
    [ $done = 1 ] && break
    sleep 0.2
  done
fi
wait $W
[ -n "$CATPID" ] && kill $CATPID 2>/dev/null
if [ -s "$d.exit" ]; then read -r code < "$d.exit"
elif [ -s "$d.killed" ]; then read -r why < "$d.killed"; echo "{GONE} the remote job $why" >&2; exit 1
elif [ -f "$d.killed" ]; then code=137
else echo "{GONE} the remote job ended without an exit record (killed from outside, or the host restarted)" >&2; exit 1
fi
cwd=
[ -s "$d.cwd" ] && read -r cwd < "$d.cwd"
echo "{END} $code $cwd" >&2
{orphaned}
read -r f < "$d.follower"
if [ "$f" = $$ ] && ! orphaned; then
  rm -f "$d.log" "$d.pid" "$d.exit" "$d.cwd" "$d.stdin" "$d.killed" "$d.lease" "$d.bell" "$d.follower" </dev/null >/dev/null 2>&1 &
fi
exit $code
"#,
        tail_kind = TAIL_KIND,
        poll = POLL_LOG,
        orphaned = ORPHANED,
    )
}

/// Renew a remote job's lease (its watchdog kills it when talaria stops doing this): `n`
/// must differ from the last value written.
pub(crate) fn lease_script(prefix: &str, n: u64) -> String {
    format!("d={prefix}\n[ -e \"$d.pid\" ] && echo {n} > \"$d.lease\"\nexit 0\n")
}

/// Kill a remote job's process group: SIGTERM, up to `grace_s`, SIGKILL, then wait (up to
/// 10 s) until none of it is left.
pub(crate) fn kill_script(prefix: &str, grace_s: f64) -> String {
    let ticks = (grace_s.max(0.0) * 20.0).ceil() as u64;
    format!(
        r#"d={prefix}
[ -s "$d.pid" ] || exit 0
[ -s "$d.exit" ] && exit 0
read -r pid < "$d.pid"
: > "$d.killed"
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
        let gone = markers("__talaria_gone its files are gone\n");
        assert_eq!(gone.gone.as_deref(), Some("its files are gone"));
        assert_eq!(strip_markers("a\n__talaria_gone x\nb"), "a\nb");
    }

    #[test]
    fn remote_paths() {
        assert_eq!(remote_path_expr("~/.cache/t"), "\"$HOME\"/'.cache/t'");
        assert_eq!(remote_path_expr("/var/t"), "'/var/t'");
        assert_eq!(job_dir_expr("~/j/", "job_1-ab"), "\"$HOME\"/'j'/'job_1-ab'");
    }

    fn sh(script: &str, args: &[&str]) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    /// The scripts run under a real `sh` (dash on Debian): a start runs the command, relays
    /// output, exit code and cwd, and cleans up.
    #[test]
    fn start_script_runs_locally_under_sh() {
        let root = tempfile::tempdir().unwrap();
        let prefix = root.path().join("jobs").join("j1");
        let script = start_script(
            &sh_quote(&prefix.to_string_lossy()),
            "echo hi; cd /; echo err >&2; exit 7",
            "/tmp",
            false,
            "bash",
            600,
        );
        let out = sh(&script, &[]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\nerr\n");
        assert_eq!(out.status.code(), Some(7));
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert!(m.started);
        assert_eq!(m.end, Some(7));
        assert_eq!(m.cwd.as_deref(), Some("/"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let left = || {
            std::fs::read_dir(root.path().join("jobs"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("j1"))
                .collect::<Vec<_>>()
        };
        while !left().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the job's files are removed: {:?}", left());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A command that runs on is streamed: its first line arrives while it still runs (it
    /// waits for a file that the test creates only after reading that line; if nothing were
    /// streamed it would give up after 30 s and mark that it ended), then the rest, its exit
    /// code and its cwd.
    #[test]
    fn a_longer_command_is_streamed_while_it_runs() {
        use std::io::{BufRead, BufReader, Read};
        let root = tempfile::tempdir().unwrap();
        let stop = root.path().join("stop");
        let ended = root.path().join("ended");
        let prefix = root.path().join("s1");
        let command = format!(
            "echo first; n=0; while [ ! -e {stop} ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done; \
             : > {ended}; echo second; cd /; exit 5",
            stop = sh_quote(&stop.to_string_lossy()),
            ended = sh_quote(&ended.to_string_lossy()),
        );
        let script = start_script(&sh_quote(&prefix.to_string_lossy()), &command, "", false, "bash", 600);
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "first\n");
        assert!(!ended.exists(), "the first line came only once the command had ended: not streamed");
        std::fs::write(&stop, "").unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "second\n");
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(5));
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let m = markers(&err);
        assert_eq!((m.end, m.cwd.as_deref()), (Some(5), Some("/")), "{err}");
    }

    /// Where `tail` is not GNU's (busybox), the follower polls the log instead: same output,
    /// exit code and cwd.
    #[test]
    fn the_polling_follower_works_without_gnu_tail() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(".tail-posix"), "").unwrap();
        let prefix = root.path().join("p1");
        let script = start_script(
            &sh_quote(&prefix.to_string_lossy()),
            "echo one; sleep 0.3; printf two; cd /; exit 4",
            "",
            false,
            "bash",
            600,
        );
        let out = sh(&script, &[]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo");
        assert_eq!(out.status.code(), Some(4));
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert_eq!((m.end, m.cwd.as_deref()), (Some(4), Some("/")));
    }

    /// Nobody renews the lease: the watchdog kills the job's group after `lease_s`.
    #[test]
    fn the_watchdog_kills_a_job_whose_lease_is_not_renewed() {
        let root = tempfile::tempdir().unwrap();
        let prefix = root.path().join("wd");
        let mark = format!("{}", 3_000_000 + std::process::id() % 1_000_000);
        let script = start_script(&sh_quote(&prefix.to_string_lossy()), &format!("sleep {mark}"), "", false, "bash", 2);
        let started = std::time::Instant::now();
        let out = sh(&script, &[]);
        let took = started.elapsed();
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert_eq!(m.end, Some(143), "killed by SIGTERM: {m:?}");
        assert!(took >= std::time::Duration::from_secs(2), "not before the lease ran out: {took:?}");
        assert!(took < std::time::Duration::from_secs(30), "{took:?}");
    }

    /// Re-attaching streams the log from the given offset and reports the real exit; a job
    /// whose files are gone is reported gone, never as an exit code.
    #[test]
    fn attach_script_resumes_at_the_offset_and_reports_gone() {
        let root = tempfile::tempdir().unwrap();
        let prefix = root.path().join("j2");
        let p = prefix.to_string_lossy().to_string();
        std::fs::write(format!("{p}.log"), "0123456789tail\n").unwrap();
        std::fs::write(format!("{p}.pid"), "999999999\n").unwrap();
        std::fs::write(format!("{p}.exit"), "5\n").unwrap();
        std::fs::write(format!("{p}.cwd"), "/srv\n").unwrap();
        let script = attach_script(&sh_quote(&p));
        let out = sh(&script, &["10"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "tail\n");
        assert_eq!(out.status.code(), Some(5));
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert!(m.started && m.gone.is_none());
        assert_eq!((m.end, m.cwd.as_deref()), (Some(5), Some("/srv")));

        let out = sh(&attach_script(&sh_quote(&root.path().join("nothing").to_string_lossy())), &["0"]);
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert!(!m.started && m.end.is_none(), "{m:?}");
        assert!(m.gone.is_some_and(|g| g.contains("files are gone")));

        // The process is gone and nothing recorded its end: lost, not an exit code.
        let q = root.path().join("j3").to_string_lossy().to_string();
        std::fs::write(format!("{q}.log"), "x").unwrap();
        std::fs::write(format!("{q}.pid"), "999999999\n").unwrap();
        let out = sh(&attach_script(&sh_quote(&q)), &["1"]);
        let m = markers(&String::from_utf8_lossy(&out.stderr));
        assert!(m.started && m.end.is_none(), "{m:?}");
        assert!(m.gone.is_some_and(|g| g.contains("without an exit record")));
    }
}
