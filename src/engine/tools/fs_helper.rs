//! The file tools' I/O under the kernel sandbox (DESIGN §6). `read_file`, `search_files`,
//! `write_file` (inside the roots), `edit_file` and `@path` mentions do not open files in
//! talaria: they ask a helper process, `talaria __fs`, started under the same Landlock
//! rules and mounts as a job ([`sandbox::prepare_helper`]). So the kernel decides what is
//! readable and writable when the file is opened, symlinks included, with no window
//! between a check and the open.
//!
//! One helper per policy is kept warm; it speaks one JSON line per request and per reply
//! on its stdin and stdout, and exits when its stdin closes (talaria gone). A helper that
//! died or was killed (an interrupted search) is started again on the next call. Where
//! the kernel sandbox is not active the same code runs in talaria itself, and reads are
//! refused by path instead (`deny_read`).
//!
//! A write outside the roots the user approved is not done here: [`write_beneath`] does
//! it in talaria, with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)` beneath the
//! approved directory, so no link swapped in meanwhile is followed.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::ToolResult;
use crate::engine::sandbox::{self, Policy};
use crate::protocol::ToolStatus;
use crate::util::lock;

/// `talaria __fs`: the hidden subcommand that serves requests.
pub const ARG: &str = "__fs";

/// Set in the helper process: permission errors there are the sandbox's answer.
static IN_HELPER: AtomicBool = AtomicBool::new(false);

/// Whether this process is the sandboxed helper (for error wording).
pub(crate) fn in_helper() -> bool {
    IN_HELPER.load(Ordering::Relaxed)
}

/// One request to the helper. Paths are absolute (the helper runs in `/`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// `read_file`: the tool result for these lines.
    Read { path: PathBuf, offset: Option<u64>, limit: Option<u64>, max_chars: usize },
    /// `search_files` under `root`.
    Search { root: PathBuf, pattern: String, glob: Option<String>, max_chars: usize },
    /// The whole text of a file (`edit_file`): `{"text": ...}`.
    Load { path: PathBuf },
    /// An `@path` mention: `{"kind": "file"|"missing"|"binary", "text", "len"}`.
    Attach { path: PathBuf, max: usize },
    /// Create or replace a regular file (parents created): `{"created": bool}`.
    Write { path: PathBuf, content: String },
}

/// A reply: a tool result without its display facts but its status.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    value: Value,
    #[serde(default)]
    status: Option<ToolStatus>,
}

/// What the helper does with one request (also what talaria does itself when there is no
/// kernel sandbox). A refusal by the sandbox is marked `denied`.
pub(crate) fn serve(request: &Request) -> ToolResult {
    let mut result = serve_request(request);
    if !result.ok && result.value["error"].as_str().is_some_and(|e| e.contains(SANDBOX_STOPPED)) {
        result.value["status"] = json!("denied");
        result.status = Some(ToolStatus::Denied);
    }
    result
}

/// The words every refusal by the sandbox carries.
const SANDBOX_STOPPED: &str = "the sandbox stopped it";

fn serve_request(request: &Request) -> ToolResult {
    let never = CancellationToken::new();
    match request {
        Request::Read { path, offset, limit, max_chars } => {
            super::files::read_file_at(path, *offset, *limit, *max_chars)
        }
        Request::Search { root, pattern, glob, max_chars } => {
            super::search::search_at(root, pattern, glob.as_deref(), *max_chars, &never)
        }
        Request::Load { path } => match super::files::load_text(path) {
            Ok(text) => ToolResult::ok(json!({ "text": text })),
            Err(message) => ToolResult::error(message),
        },
        Request::Attach { path, max } => attach(path, *max),
        Request::Write { path, content } => match super::files::write_creating_parents(path, content.as_bytes()) {
            Ok(created) => ToolResult::ok(json!({ "created": created })),
            Err(e) => ToolResult::error(super::files::io_problem(path, &e, "write")),
        },
    }
}

fn attach(path: &Path, max: usize) -> ToolResult {
    use std::io::Read;
    let missing = || ToolResult::ok(json!({ "kind": "missing" }));
    let Ok(meta) = std::fs::metadata(path) else { return missing() };
    if !meta.is_file() {
        return missing();
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return ToolResult::error(super::files::io_problem(path, &e, "read")),
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.take(max as u64).read_to_end(&mut bytes) {
        return ToolResult::error(super::files::io_problem(path, &e, "read"));
    }
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return ToolResult::ok(json!({ "kind": "binary" }));
    }
    ToolResult::ok(json!({ "kind": "file", "text": String::from_utf8_lossy(&bytes), "len": meta.len() }))
}

/// The body of `talaria __fs`: answer requests until stdin closes. Never returns.
pub fn run() -> ! {
    IN_HELPER.store(true, Ordering::Relaxed);
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        let result = match serde_json::from_str::<Request>(&line) {
            Ok(request) => serve(&request),
            Err(e) => ToolResult::error(format!("file helper: bad request: {e}")),
        };
        let reply = Reply { ok: result.ok, value: result.value, status: result.status };
        let sent = serde_json::to_writer(&mut stdout, &reply).is_ok()
            && stdout.write_all(b"\n").is_ok()
            && stdout.flush().is_ok();
        if !sent {
            break;
        }
    }
    std::process::exit(0)
}

// ---------------------------------------------------------------------------------------------
// The warm helpers.

struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One policy's helper: the process (None until started, or after it died) and its pid,
/// readable without the lock so an interrupt can kill a helper busy with a request.
struct Slot {
    helper: Mutex<Option<Helper>>,
    pid: AtomicI32,
    /// Set when an interrupt killed the helper: its request is not tried again.
    killed: AtomicBool,
}

static SLOTS: Mutex<Vec<(Policy, Arc<Slot>)>> = Mutex::new(Vec::new());

fn slot_for(policy: &Policy) -> Arc<Slot> {
    let mut slots = lock(&SLOTS);
    if let Some((_, slot)) = slots.iter().find(|(p, _)| p == policy) {
        return slot.clone();
    }
    let slot = Arc::new(Slot { helper: Mutex::new(None), pid: AtomicI32::new(0), killed: AtomicBool::new(false) });
    slots.push((policy.clone(), slot.clone()));
    slot
}

fn spawn(policy: &Policy) -> std::io::Result<Helper> {
    use std::os::unix::process::CommandExt;
    let exe = crate::engine::jobs::SupervisorExe::CurrentExe.resolve()?;
    let mut prepared = sandbox::prepare_helper(policy).map_err(std::io::Error::other)?;
    let mut cmd = Command::new(exe);
    // No environment: the helper needs none, and must see no secret.
    cmd.arg(ARG).current_dir("/").env_clear().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    // SAFETY: apply_in_child only makes async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || sandbox::apply_in_child(&mut prepared));
    }
    let mut child = cmd.spawn()?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the file helper has no pipes"));
    };
    Ok(Helper { child, stdin, stdout: BufReader::new(stdout) })
}

fn exchange(helper: &mut Helper, request: &Request) -> std::io::Result<ToolResult> {
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    helper.stdin.write_all(&line)?;
    helper.stdin.flush()?;
    let mut reply = String::new();
    if helper.stdout.read_line(&mut reply)? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file helper exited"));
    }
    let reply: Reply = serde_json::from_str(&reply)?;
    Ok(ToolResult { value: reply.value, ok: reply.ok, exit_code: None, status: reply.status })
}

/// Run `request` under `policy`'s sandbox (blocking). Where the kernel sandbox is not
/// active it runs here, reads of protected paths refused by path.
pub fn call_blocking(policy: &Policy, request: &Request) -> ToolResult {
    if !policy.active() {
        return serve_unsandboxed(policy, request);
    }
    let slot = slot_for(policy);
    let mut guard = lock(&slot.helper);
    slot.killed.store(false, Ordering::Relaxed);
    // A helper that died (killed by an interrupt, crashed) is replaced once.
    for attempt in 0..2 {
        if guard.is_none() {
            match spawn(policy) {
                Ok(helper) => *guard = Some(helper),
                Err(e) => return ToolResult::error(format!("could not start the sandboxed file helper: {e}")),
            }
        }
        let Some(helper) = guard.as_mut() else { continue };
        // The pid is published only while a request runs: an interrupt kills a busy helper.
        slot.pid.store(helper.child.id() as i32, Ordering::Relaxed);
        let exchanged = exchange(helper, request);
        slot.pid.store(0, Ordering::Relaxed);
        match exchanged {
            Ok(result) => return result,
            Err(e) => {
                *guard = None;
                if slot.killed.swap(false, Ordering::Relaxed) {
                    return ToolResult::error("interrupted").with_status(ToolStatus::Interrupted);
                }
                if attempt == 1 {
                    return ToolResult::error(format!("the sandboxed file helper failed: {e}"));
                }
            }
        }
    }
    ToolResult::error("the sandboxed file helper failed")
}

/// [`call_blocking`] off the async threads; an interrupt kills the helper (a long search)
/// and answers "interrupted".
pub async fn call(policy: &Policy, request: Request, interrupt: &CancellationToken) -> ToolResult {
    let owned = policy.clone();
    let task = tokio::task::spawn_blocking(move || call_blocking(&owned, &request));
    tokio::select! {
        biased;
        done = task => done.unwrap_or_else(|e| ToolResult::error(format!("file helper task failed: {e}"))),
        _ = interrupt.cancelled() => {
            if policy.active() {
                let slot = slot_for(policy);
                let pid = slot.pid.load(Ordering::Relaxed);
                if pid > 0 {
                    slot.killed.store(true, Ordering::Relaxed);
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
            }
            ToolResult::error("interrupted").with_status(ToolStatus::Interrupted)
        }
    }
}

/// No kernel sandbox: the protected paths are refused by where they lead.
fn serve_unsandboxed(policy: &Policy, request: &Request) -> ToolResult {
    let path = match request {
        Request::Read { path, .. } | Request::Load { path } | Request::Attach { path, .. } => path,
        Request::Search { root, .. } => root,
        Request::Write { path, .. } => path,
    };
    let real = sandbox::canonical(path);
    let denied = policy.deny_read.iter().any(|d| real.starts_with(d) || d.starts_with(&real));
    if denied && !matches!(request, Request::Write { .. }) {
        return refused(path, "read");
    }
    serve(request)
}

/// A result saying the sandbox stopped the tool, and what to do instead.
pub(crate) fn refused(path: &Path, verb: &str) -> ToolResult {
    ToolResult {
        value: json!({ "error": refusal_text(path, verb), "status": "denied" }),
        ok: false,
        exit_code: None,
        status: Some(ToolStatus::Denied),
    }
}

/// "Permission denied …: the sandbox stopped it; ways on: …".
pub(crate) fn refusal_text(path: &Path, verb: &str) -> String {
    let ways = if verb == "read" {
        "it is a credential store, talaria's own file or under sandbox.deny_read (or the file's permissions \
         forbid it); ask the user for what you need from it"
    } else {
        "write inside the writable roots (see /permissions), or ask the user to add the directory to \
         sandbox.writable_roots"
    };
    format!("Permission denied: cannot {verb} {}: {SANDBOX_STOPPED}; ways on: {ways}", path.display())
}

// ---------------------------------------------------------------------------------------------
// Approved writes outside the roots.

/// Open `dir` (absolute, free of symlinks) as a directory, creating what is missing of it
/// one component at a time, never following a symlink.
fn open_dir_creating(dir: &Path) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match openat2(AT_FDCWD, dir, how) {
        Ok(fd) => return Ok(fd),
        Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
    };
    let parent_fd = open_dir_creating(parent)?;
    match nix::sys::stat::mkdirat(parent_fd.as_fd(), name, nix::sys::stat::Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let beneath = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH);
    Ok(openat2(parent_fd.as_fd(), name, beneath)?)
}

/// Open the file `name` beneath `dir` (read, or write creating it), following no symlink.
fn open_beneath(dir: &OwnedFd, name: &std::ffi::OsStr, write: bool) -> std::io::Result<std::fs::File> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    let access = if write { OFlag::O_WRONLY | OFlag::O_CREAT } else { OFlag::O_RDONLY };
    let mut how = OpenHow::new()
        .flags(access | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH);
    // openat2 refuses a mode without O_CREAT.
    if write {
        how = how.mode(nix::sys::stat::Mode::from_bits_truncate(0o644));
    }
    let file = std::fs::File::from(openat2(dir.as_fd(), name, how)?);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

fn split(path: &Path) -> std::io::Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) if path.is_absolute() => Ok((dir, name)),
        _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an absolute file path")),
    }
}

/// Write `content` to the approved, fully resolved `path` in talaria itself: its directory
/// is opened (created) without following any symlink, the file beneath it likewise. A
/// link swapped in since the approval makes the write fail rather than go elsewhere.
/// Returns whether the file was created.
pub fn write_beneath(path: &Path, content: &[u8]) -> std::io::Result<bool> {
    let (dir, name) = split(path)?;
    let dir_fd = open_dir_creating(dir)?;
    let created = nix::sys::stat::fstatat(dir_fd.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_err();
    let mut file = open_beneath(&dir_fd, name, true)?;
    file.set_len(0)?;
    file.write_all(content)?;
    Ok(created)
}

/// The text of the approved, fully resolved `path`, opened like [`write_beneath`] opens.
pub(crate) fn load_beneath(path: &Path) -> Result<String, String> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
    let problem = |e: std::io::Error| super::files::io_problem(path, &e, "read");
    let (dir, name) = split(path).map_err(problem)?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    let dir_fd = openat2(AT_FDCWD, dir, how).map_err(|e| problem(e.into()))?;
    let file = open_beneath(&dir_fd, name, false).map_err(problem)?;
    super::files::text_of(file, path)
}
