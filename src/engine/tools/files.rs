//! `read_file`, `write_file` and `edit_file` (DESIGN §4a). The `Tool` impls are thin: they
//! resolve the path against the session's working directory and call the `*_at` functions,
//! which tests drive directly.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{arg_bool, arg_str, arg_u64, Concurrency, Tool, ToolCtx, ToolResult};
use crate::engine::approval::{Approver, Verdict};
use crate::engine::args::{lenient, parse};
use crate::protocol::ToolStatus;

/// Lines shown when the model gives no `limit`.
pub(crate) const DEFAULT_READ_LIMIT: usize = 2_000;
/// Files larger than this are not read (nor edited) whole.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// A longer line is cut, with a marker saying how long it was.
pub(crate) const MAX_LINE_CHARS: usize = 2_000;

// ---------------------------------------------------------------------------------------------
// read_file

/// Read `limit` lines from 1-based line `offset`, numbered like `    12│text`, keeping the
/// content under `max_chars` characters.
pub fn read_file_at(path: &Path, offset: Option<u64>, limit: Option<u64>, max_chars: usize) -> ToolResult {
    let bytes = match load_text_file(path) {
        Ok(bytes) => bytes,
        Err(message) => return ToolResult::error(message),
    };
    render_read(&bytes, &path.display().to_string(), offset, limit, max_chars)
}

/// `read_file` as the tool runs it: in the sandboxed helper, so the kernel decides whether
/// `path` (and every link on the way) may be read.
pub async fn read_file_sandboxed(
    path: &Path,
    offset: Option<u64>,
    limit: Option<u64>,
    max_chars: usize,
    approvals: &Approver,
) -> ToolResult {
    let request = super::fs_helper::Request::Read { path: path.to_path_buf(), offset, limit, max_chars };
    super::fs_helper::call(&approvals.sandbox_policy(), request, &CancellationToken::new()).await
}

/// The `read_file` result for a text file's bytes (also for a file read on a remote backend).
pub(crate) fn render_read(
    bytes: &[u8],
    shown_path: &str,
    offset: Option<u64>,
    limit: Option<u64>,
    max_chars: usize,
) -> ToolResult {
    let text = String::from_utf8_lossy(bytes);
    let lines = split_lines(&text);
    let total = lines.len();
    if total == 0 {
        return ToolResult::ok(json!({
            "path": shown_path,
            "content": "",
            "total_lines": 0,
            "showing": "empty file",
        }));
    }
    let first = offset.unwrap_or(1).max(1) as usize;
    if first > total {
        return ToolResult::error(format!(
            "offset {first} is past the end of {shown_path}, which has {total} lines; use an offset from 1 to {total}"
        ));
    }
    let limit = match limit {
        Some(0) | None => DEFAULT_READ_LIMIT,
        Some(n) => n as usize,
    };
    let last_wanted = first.saturating_add(limit - 1).min(total);
    let width = number_width(last_wanted);
    let mut content = String::new();
    let mut used_chars = 0usize;
    let mut last = first - 1;
    for (idx, line) in lines.iter().enumerate().take(last_wanted).skip(first - 1) {
        let numbered = numbered_line(idx + 1, width, line);
        let len = numbered.chars().count();
        if used_chars + len > max_chars && last >= first {
            break;
        }
        used_chars += len;
        content.push_str(&numbered);
        last = idx + 1;
    }
    if content.ends_with('\n') {
        content.pop();
    }
    let mut value = json!({
        "path": shown_path,
        "content": content,
        "total_lines": total,
        "showing": format!("lines {first}-{last} of {total}"),
    });
    if last < total {
        let why =
            if last < last_wanted { format!(" (output capped at {max_chars} characters)") } else { String::new() };
        value["note"] =
            json!(format!("Showing lines {first}-{last} of {total}{why}. Use offset={} to read more.", last + 1));
    }
    ToolResult::ok(value)
}

fn number_width(last_line: usize) -> usize {
    last_line.to_string().len().max(6)
}

fn numbered_line(n: usize, width: usize, line: &str) -> String {
    let count = line.chars().count();
    if count > MAX_LINE_CHARS {
        let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
        format!("{n:>width$}│{cut}… [line cut: {count} characters]\n")
    } else {
        format!("{n:>width$}│{line}\n")
    }
}

/// How many lines `text` has, as read_file counts them.
pub(crate) fn line_count(text: &str) -> usize {
    split_lines(text).len()
}

/// Lines without their terminators; a final newline does not start another line.
fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect()
}

/// The bytes of a text file, or an error the model can act on (missing, a directory, too
/// big, binary, unreadable).
fn load_text_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO must not hang the tool; fstat then tells what was opened.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_problem(path, &e, "read"))?;
    bytes_of(file, path)
}

/// The whole text of the UTF-8 file at `path` (for `edit_file`).
pub(crate) fn load_text(path: &Path) -> Result<String, String> {
    let bytes = load_text_file(path).map_err(|e| {
        if path.exists() {
            e
        } else {
            format!("{e} edit_file changes existing files; use write_file to create a new one.")
        }
    })?;
    utf8(bytes, path)
}

/// The whole text of an opened file.
pub(crate) fn text_of(file: std::fs::File, path: &Path) -> Result<String, String> {
    utf8(bytes_of(file, path)?, path)
}

fn utf8(bytes: Vec<u8>, path: &Path) -> Result<String, String> {
    String::from_utf8(bytes)
        .map_err(|_| format!("{} is not valid UTF-8 text; edit_file only edits UTF-8 files", path.display()))
}

fn bytes_of(file: std::fs::File, path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = file.metadata().map_err(|e| io_problem(path, &e, "read"))?;
    if !meta.is_dir() && !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a FIFO, socket or device); file tools only read regular files",
            path.display()
        ));
    }
    if meta.is_dir() {
        return Err(format!(
            "{} is a directory, not a file; use search_files or the terminal (ls) to look inside it",
            path.display()
        ));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{} is {:.1} MiB, over the {} MiB limit for reading a whole file; use search_files, or the terminal \
             (head, tail, sed -n 'a,bp') to read parts of it",
            path.display(),
            meta.len() as f64 / (1024.0 * 1024.0),
            MAX_FILE_BYTES / (1024 * 1024)
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).map_err(|e| io_problem(path, &e, "read"))?;
    // The whole file, not just its start: a read from any offset must not show binary data.
    if bytes.contains(&0) {
        return Err(format!(
            "{} looks like a binary file (it contains NUL bytes); these tools only handle text — use the terminal \
             (file, xxd, strings) to inspect it",
            path.display()
        ));
    }
    Ok(bytes)
}

/// An I/O error as a sentence that says what to do next.
pub(crate) fn io_problem(path: &Path, err: &std::io::Error, verb: &str) -> String {
    match err.kind() {
        ErrorKind::NotFound => {
            let mut msg = format!("File not found: {}. Check the path", path.display());
            match path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
                    msg.push_str(&format!(" (the directory {} does not exist either)", dir.display()));
                }
                _ => {
                    let similar = similar_names(path);
                    if !similar.is_empty() {
                        msg.push_str(&format!(" — similar names there: {}", similar.join(", ")));
                    }
                }
            }
            msg.push_str("; relative paths start from the session's working directory.");
            msg
        }
        ErrorKind::PermissionDenied if super::fs_helper::in_helper() => super::fs_helper::refusal_text(path, verb),
        ErrorKind::PermissionDenied => format!("Permission denied: cannot {verb} {}", path.display()),
        _ => format!("Could not {verb} {}: {err}", path.display()),
    }
}

/// Up to five entries next to a missing file whose names look like it (case, extension).
fn similar_names(path: &Path) -> Vec<String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Vec::new() };
    let name = name.to_string_lossy().to_lowercase();
    let stem = name.split('.').next().unwrap_or(&name).to_string();
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|candidate| {
            let lower = candidate.to_lowercase();
            lower == name || (!stem.is_empty() && lower.split('.').next() == Some(stem.as_str()))
        })
        .collect();
    found.sort();
    found.truncate(5);
    found
}

// ---------------------------------------------------------------------------------------------
// write_file and edit_file

/// Where an approved write is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteWay {
    /// Inside the writable roots: by the sandboxed helper, so the kernel has the last word.
    Sandboxed,
    /// Outside them (or under a protected path), approved: in talaria, beneath the
    /// approved directory, following no symlink.
    Beneath,
}

/// An approved write: the resolved path, the approval note, and how to do it.
struct Approved {
    real: PathBuf,
    note: Option<String>,
    way: WriteWay,
    /// The policy it was judged against (the helper's).
    policy: crate::engine::sandbox::Policy,
}

/// Ask the approver whether `path` may be written, judged by where it really leads: every
/// symlink on the way is resolved, a dangling final one included.
async fn approve_write(
    path: &Path,
    approvals: &Approver,
    interrupt: &CancellationToken,
) -> Result<Approved, ToolResult> {
    let real = match resolve_checked(path) {
        Ok(real) => real,
        Err(message) => return Err(ToolResult::error(message)),
    };
    if std::fs::symlink_metadata(&real).is_ok_and(|m| !m.is_file()) {
        return Err(ToolResult::error(format!(
            "{} is not a regular file (a directory, FIFO, socket or device); file tools only write regular files",
            path.display()
        )));
    }
    let policy = approvals.sandbox_policy();
    let inside = approvals.write_is_inside(&real, &policy);
    match approvals.check_write(&real, &policy, interrupt).await {
        Verdict::Allowed { note, .. } => {
            let way = if inside && policy.active() { WriteWay::Sandboxed } else { WriteWay::Beneath };
            Ok(Approved { real, note, way, policy })
        }
        Verdict::Denied { reason } => Err(ToolResult {
            value: json!({ "error": format!("Writing {} was not allowed: {reason}", path.display()), "status": "denied" }),
            ok: false,
            exit_code: None,
            status: Some(ToolStatus::Denied),
        }),
    }
}

/// Links followed at most while resolving a path (the kernel's own limit).
const MAX_LINK_HOPS: usize = 40;

/// `path` made absolute with every symlink resolved, including a final component that is
/// a dangling symlink (where a write would create the file) and parts that do not exist
/// yet; refused when it needs more than 40 links (the kernel's own limit).
pub(crate) fn resolve_checked(path: &Path) -> Result<PathBuf, String> {
    match resolve_counting(path) {
        (real, true) => Ok(real),
        (_, false) => Err(format!(
            "{} goes through more than {MAX_LINK_HOPS} symbolic links; file tools do not follow it — give the \
             real path",
            path.display()
        )),
    }
}

/// The resolved path, and whether every link on the way was followed.
fn resolve_counting(path: &Path) -> (PathBuf, bool) {
    use std::collections::VecDeque;
    use std::path::Component;
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")).join(path)
    };
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    let mut out = PathBuf::from("/");
    let push_parts = |todo: &mut VecDeque<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push_front(n.to_owned()),
                Component::ParentDir => todo.push_front("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push_parts(&mut todo, &absolute);
    let mut hops = 0;
    let mut complete = true;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&part);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                if hops == MAX_LINK_HOPS {
                    complete = false;
                    out = next;
                    continue;
                }
                hops += 1;
                match std::fs::read_link(&next) {
                    Ok(target) => {
                        if target.is_absolute() {
                            out = PathBuf::from("/");
                        }
                        push_parts(&mut todo, &target);
                    }
                    Err(_) => out = next,
                }
            }
            _ => out = next,
        }
    }
    (out, complete)
}

/// Open `path` for writing without following a symlink at its end and without blocking
/// on a FIFO, and refuse anything that is not a regular file.
fn open_regular_for_write(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

/// Replace the contents of the regular file at `path` (no symlink, FIFO or device),
/// creating it and its parent directories. Returns whether the file was created. Runs in
/// the sandboxed helper.
pub(crate) fn write_creating_parents(path: &Path, content: &[u8]) -> std::io::Result<bool> {
    use std::io::Write;
    let created = std::fs::symlink_metadata(path).is_err();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = open_regular_for_write(path)?;
    file.set_len(0)?;
    file.write_all(content)?;
    Ok(created)
}

/// Do an approved write the way its approval says; Ok(created) or the tool's error.
async fn do_write(approved: &Approved, shown: &Path, content: String) -> Result<bool, ToolResult> {
    let real = approved.real.clone();
    match approved.way {
        WriteWay::Sandboxed => {
            let result = super::fs_helper::call(
                &approved.policy,
                super::fs_helper::Request::Write { path: real, content },
                &CancellationToken::new(),
            )
            .await;
            if result.ok {
                Ok(result.value["created"].as_bool().unwrap_or(false))
            } else {
                Err(result)
            }
        }
        WriteWay::Beneath => {
            let shown = shown.to_path_buf();
            tokio::task::spawn_blocking(move || super::fs_helper::write_beneath(&real, content.as_bytes()))
                .await
                .map_err(|e| ToolResult::error(format!("write failed unexpectedly: {e}")))?
                .map_err(|e| ToolResult::error(io_problem(&shown, &e, "write")))
        }
    }
}

/// Write `content` to `path`, creating parent directories, after the approval check.
pub async fn write_file_at(
    path: &Path,
    content: &str,
    approvals: &Approver,
    interrupt: &CancellationToken,
) -> ToolResult {
    if path.is_dir() {
        return ToolResult::error(format!("{} is a directory; give write_file a file path", path.display()));
    }
    let approved = match approve_write(path, approvals, interrupt).await {
        Ok(approved) => approved,
        Err(denied) => return denied,
    };
    let created = match do_write(&approved, path, content.to_string()).await {
        Ok(created) => created,
        Err(failed) => return failed,
    };
    let mut value = json!({
        "status": "ok",
        "path": path.display().to_string(),
        "bytes": content.len(),
        "lines": split_lines(content).len(),
        "created": created,
    });
    if let Some(note) = approved.note {
        value["approval"] = json!(note);
    }
    ToolResult::ok(value)
}

/// One `edit_file` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub old_string: String,
    pub new_string: String,
    pub replace_all: bool,
}

/// A successful edit, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edited {
    pub(crate) content: String,
    pub(crate) replacements: usize,
    /// 1-based line where the first replacement starts.
    pub(crate) first_line: usize,
}

/// Apply `edit` to `content` in memory. Errors say why the edit cannot be made and what to
/// do instead (`path` names the file in them).
pub(crate) fn apply_edit(content: &str, edit: &Edit, path: &str) -> Result<Edited, String> {
    if edit.old_string.is_empty() {
        return Err("old_string is empty; to create a file or replace all of it use write_file".into());
    }
    if edit.old_string == edit.new_string {
        return Err("old_string and new_string are the same, so there is nothing to change".into());
    }
    let (old, new) = match_line_endings(content, edit);
    let positions: Vec<usize> = content.match_indices(old.as_str()).map(|(i, _)| i).collect();
    let line_of = |pos: usize| content[..pos].matches('\n').count() + 1;
    match positions.len() {
        0 => Err(not_found_message(content, &edit.old_string, path)),
        n if n > 1 && !edit.replace_all => {
            let mut lines: Vec<usize> = positions.iter().map(|p| line_of(*p)).collect();
            lines.dedup();
            let mut shown: Vec<String> = lines.iter().take(10).map(usize::to_string).collect();
            if lines.len() > 10 {
                shown.push("…".into());
            }
            let label = if lines.len() == 1 { "line" } else { "lines" };
            Err(format!(
                "old_string is ambiguous: {n} matches in {path} ({label} {}); add context or set replace_all",
                shown.join(", ")
            ))
        }
        n => {
            let replaced = if edit.replace_all {
                content.replace(old.as_str(), &new)
            } else {
                content.replacen(old.as_str(), &new, 1)
            };
            Ok(Edited { content: replaced, replacements: n, first_line: line_of(positions[0]) })
        }
    }
}

/// A file with CRLF line endings edited with `\n` strings: match and write CRLF.
fn match_line_endings(content: &str, edit: &Edit) -> (String, String) {
    let crlf_file = content.contains("\r\n");
    if crlf_file
        && edit.old_string.contains('\n')
        && !edit.old_string.contains("\r\n")
        && !content.contains(&edit.old_string)
    {
        (edit.old_string.replace('\n', "\r\n"), edit.new_string.replace("\r\n", "\n").replace('\n', "\r\n"))
    } else {
        (edit.old_string.clone(), edit.new_string.clone())
    }
}

fn not_found_message(content: &str, old: &str, path: &str) -> String {
    let mut msg = format!("old_string was not found in {path}");
    // A passage equal line by line once indentation and trailing spaces are ignored.
    let want: Vec<&str> = old.lines().map(str::trim).collect();
    let have: Vec<&str> = content.lines().map(str::trim).collect();
    let near = if want.is_empty() || want.iter().all(|l| l.is_empty()) {
        None
    } else {
        (0..have.len().saturating_sub(want.len() - 1)).find(|&i| have[i..i + want.len()] == want[..])
    };
    match near {
        Some(i) => msg.push_str(&format!(
            "; a passage that differs only in whitespace or indentation starts at line {} — copy it exactly as \
             read_file shows it (the text after │)",
            i + 1
        )),
        None => msg.push_str("; read the file again and copy the exact text, including whitespace and indentation"),
    }
    msg
}

/// The text of `path` read the way `way` writes: by the sandboxed helper, or beneath
/// the approved directory.
async fn load_for_edit(path: &Path, way: WriteWay, policy: &crate::engine::sandbox::Policy) -> ToolResult {
    match way {
        WriteWay::Sandboxed => {
            let request = super::fs_helper::Request::Load { path: path.to_path_buf() };
            super::fs_helper::call(policy, request, &CancellationToken::new()).await
        }
        WriteWay::Beneath => {
            let path = path.to_path_buf();
            match tokio::task::spawn_blocking(move || super::fs_helper::load_beneath(&path)).await {
                Ok(Ok(text)) => ToolResult::ok(json!({ "text": text })),
                Ok(Err(message)) => ToolResult::error(message),
                Err(e) => ToolResult::error(format!("edit_file failed unexpectedly: {e}")),
            }
        }
    }
}

/// Replace `old_string` with `new_string` in an existing file, after the approval check.
pub async fn edit_file_at(path: &Path, edit: &Edit, approvals: &Approver, interrupt: &CancellationToken) -> ToolResult {
    let shown = path.display().to_string();
    let apply = |loaded: &ToolResult| -> Result<Edited, String> {
        let text = loaded.value["text"].as_str().unwrap_or_default();
        apply_edit(text, edit, &shown)
    };
    // Check first so the user is not asked to approve an edit that cannot be made; a file
    // the sandbox will not read (a protected one) is left to the approval.
    let policy = approvals.sandbox_policy();
    let first = load_for_edit(path, WriteWay::Sandboxed, &policy).await;
    if first.ok {
        if let Err(message) = apply(&first) {
            return ToolResult::error(message);
        }
    } else if first.status != Some(ToolStatus::Denied) {
        return first;
    }
    let approved = match approve_write(path, approvals, interrupt).await {
        Ok(approved) => approved,
        Err(denied) => return denied,
    };
    // The file may have changed while the approval waited: apply the edit to what is there now.
    let now = load_for_edit(&approved.real, approved.way, &approved.policy).await;
    if !now.ok {
        return now;
    }
    let edited = match apply(&now) {
        Ok(edited) => edited,
        Err(message) => return ToolResult::error(message),
    };
    if let Err(failed) = do_write(&approved, path, edited.content.clone()).await {
        return failed;
    }
    let mut value = json!({
        "status": "ok",
        "path": shown,
        "replacements": edited.replacements,
        "line": edited.first_line,
        "snippet": snippet(&edited.content, edited.first_line, edit.new_string.lines().count().max(1)),
    });
    if let Some(note) = approved.note {
        value["approval"] = json!(note);
    }
    ToolResult::ok(value)
}

/// The changed lines with two lines of context, numbered as read_file numbers them.
pub(crate) fn edit_snippet(content: &str, first_line: usize, changed_lines: usize) -> String {
    snippet(content, first_line, changed_lines)
}

fn snippet(content: &str, first_line: usize, changed_lines: usize) -> String {
    let lines = split_lines(content);
    let start = first_line.saturating_sub(2).max(1);
    let end = (first_line + changed_lines + 1).min(lines.len()).min(start + 20);
    let width = number_width(end);
    let mut out = String::new();
    for n in start..=end {
        if let Some(line) = lines.get(n - 1) {
            out.push_str(&numbered_line(n, width, line));
        }
    }
    out.trim_end_matches('\n').to_string()
}

// ---------------------------------------------------------------------------------------------
// The tools.

/// `read_file`'s arguments.
#[derive(Debug, Deserialize)]
struct ReadArgs {
    path: String,
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    limit: Option<u64>,
}

/// `write_file`'s arguments.
#[derive(Debug, Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

/// `edit_file`'s arguments.
#[derive(Debug, Deserialize)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    replace_all: Option<bool>,
}

pub(crate) struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }
    fn description(&self) -> &'static str {
        "Read a text file. Returns numbered lines (`    12│text`; the text after │ is the file's content), \
         `total_lines` and which lines are shown. Reads up to 2000 lines from `offset` (1-based); use `offset` and \
         `limit` to page through long files. Binary files and files over 10 MiB are refused."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "File path, absolute or relative to the working directory" },
                "offset": { "type": "integer", "minimum": 1, "description": "First line to show, 1-based (default 1)" },
                "limit": { "type": "integer", "minimum": 1, "description": "Maximum number of lines (default 2000)" }
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Parallel
    }
    fn summary(&self, args: &Value) -> String {
        let path = arg_str(args, "path").unwrap_or("?");
        match (arg_u64(args, "offset"), arg_u64(args, "limit")) {
            (None, None) => path.to_string(),
            (offset, Some(limit)) => {
                let from = offset.unwrap_or(1).max(1);
                format!("{path}:{from}-{}", from.saturating_add(limit.max(1) - 1))
            }
            (Some(offset), None) => format!("{path}:{offset}-"),
        }
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let ReadArgs { path, offset, limit } = match parse("read_file", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let backend = ctx.jobs.backends().current();
        if backend.is_remote() {
            return super::remote_files::read_file(&ctx, &backend, &path, offset, limit).await;
        }
        let max_chars = ctx.config.tool_output.max_chars.max(1_000);
        read_file_sandboxed(&ctx.resolve(&path), offset, limit, max_chars, &ctx.approvals).await
    }
}

pub(crate) struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }
    fn description(&self) -> &'static str {
        "Create a file or replace its whole content. Parent directories are created. To change part of an \
         existing file prefer edit_file. Writes under system directories or ~/.ssh need the user's approval."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "File path, absolute or relative to the working directory" },
                "content": { "type": "string", "description": "The complete new content of the file" }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Sequential
    }
    fn summary(&self, args: &Value) -> String {
        let path = arg_str(args, "path").unwrap_or("?");
        match arg_str(args, "content") {
            Some(content) => format!("{path} ({} lines)", split_lines(content).len()),
            None => path.to_string(),
        }
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let WriteArgs { path, content } = match parse("write_file", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let backend = ctx.jobs.backends().current();
        if backend.is_remote() {
            return super::remote_files::write_file(&ctx, &backend, &path, &content).await;
        }
        write_file_at(&ctx.resolve(&path), &content, &ctx.approvals, &ctx.signals.interrupt).await
    }
}

pub(crate) struct EditFile;

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }
    fn description(&self) -> &'static str {
        "Replace text in an existing file. `old_string` must match the file exactly (whitespace and indentation \
         included; copy it from read_file without the line-number prefix) and must be unique unless \
         `replace_all` is true — add surrounding lines to make it unique. Returns the number of replacements and \
         the changed lines."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "description": "File path, absolute or relative to the working directory" },
                "old_string": { "type": "string", "description": "The exact text to replace" },
                "new_string": { "type": "string", "description": "The text to put in its place" },
                "replace_all": { "type": "boolean", "description": "Replace every occurrence (default false)" }
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        })
    }
    fn concurrency(&self) -> Concurrency {
        Concurrency::Sequential
    }
    fn summary(&self, args: &Value) -> String {
        let path = arg_str(args, "path").unwrap_or("?");
        if arg_bool(args, "replace_all") == Some(true) {
            format!("{path} (replace all)")
        } else {
            path.to_string()
        }
    }
    async fn call(&self, args: Value, ctx: ToolCtx) -> ToolResult {
        let args: EditArgs = match parse("edit_file", &args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let edit = Edit {
            old_string: args.old_string,
            new_string: args.new_string,
            replace_all: args.replace_all.unwrap_or(false),
        };
        let backend = ctx.jobs.backends().current();
        if backend.is_remote() {
            return super::remote_files::edit_file(&ctx, &backend, &args.path, &edit).await;
        }
        edit_file_at(&ctx.resolve(&args.path), &edit, &ctx.approvals, &ctx.signals.interrupt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn edit(old: &str, new: &str, all: bool) -> Edit {
        Edit { old_string: old.into(), new_string: new.into(), replace_all: all }
    }

    #[test]
    fn bad_arguments_get_readable_errors() {
        let e = parse::<ReadArgs>("read_file", &json!({"offset": 3})).unwrap_err();
        assert_eq!(e, "read_file: invalid arguments: missing field `path`");
        let e = parse::<ReadArgs>("read_file", &json!({"path": "a", "limit": "lots"})).unwrap_err();
        assert!(e.starts_with("read_file: invalid arguments: expected a non-negative integer"), "{e}");
        let a: ReadArgs = parse("read_file", &json!({"path": "a", "offset": "5", "limit": 2})).unwrap();
        assert_eq!((a.path.as_str(), a.offset, a.limit), ("a", Some(5), Some(2)));
        let e = parse::<WriteArgs>("write_file", &json!({"path": "a", "content": 5})).unwrap_err();
        assert!(e.contains("invalid type: integer `5`, expected a string"), "{e}");
        let e = parse::<WriteArgs>("write_file", &json!({"path": "a"})).unwrap_err();
        assert_eq!(e, "write_file: invalid arguments: missing field `content`");
        let e = parse::<EditArgs>("edit_file", &json!({"path": "a", "old_string": "x"})).unwrap_err();
        assert_eq!(e, "edit_file: invalid arguments: missing field `new_string`");
        let a: EditArgs =
            parse("edit_file", &json!({"path": "a", "old_string": "x", "new_string": "", "replace_all": "true"}))
                .unwrap();
        assert_eq!(a.replace_all, Some(true));
    }

    #[test]
    fn lines_split_like_an_editor() {
        assert_eq!(split_lines(""), Vec::<&str>::new());
        assert_eq!(split_lines("a"), vec!["a"]);
        assert_eq!(split_lines("a\n"), vec!["a"]);
        assert_eq!(split_lines("a\r\nb\r\n"), vec!["a", "b"]);
        assert_eq!(split_lines("a\n\n"), vec!["a", ""]);
    }

    #[test]
    fn edits_apply_once_or_everywhere() {
        let got = apply_edit("a b a", &edit("b", "c", false), "f").map(|e| e.content);
        assert_eq!(got, Ok("a c a".to_string()));
        let got = apply_edit("x\ny a\na", &edit("a", "z", true), "f");
        assert_eq!(got, Ok(Edited { content: "x\ny z\nz".into(), replacements: 2, first_line: 2 }));
    }

    #[test]
    fn edit_errors_say_why() {
        let err = apply_edit("a b a", &edit("a", "c", false), "f.txt").unwrap_err();
        assert_eq!(err, "old_string is ambiguous: 2 matches in f.txt (line 1); add context or set replace_all");
        assert!(apply_edit("a", &edit("a", "a", false), "f").unwrap_err().contains("the same"));
        assert!(apply_edit("a", &edit("", "b", false), "f").unwrap_err().contains("write_file"));
        let err =
            apply_edit("fn main() {\n    go();\n}\n", &edit("fn main() {\n  go();", "x", false), "m.rs").unwrap_err();
        assert!(err.contains("whitespace or indentation starts at line 1"), "{err}");
        let err = apply_edit("abc", &edit("zzz", "y", false), "m.rs").unwrap_err();
        assert!(err.starts_with("old_string was not found in m.rs; read the file again"), "{err}");
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        let got = apply_edit("one\r\ntwo\r\nthree\r\n", &edit("one\ntwo", "1\n2", false), "f").map(|e| e.content);
        assert_eq!(got, Ok("1\r\n2\r\nthree\r\n".to_string()));
    }

    #[test]
    fn summaries_are_one_line() {
        assert_eq!(ReadFile.summary(&json!({"path": "src/a.rs", "offset": 10, "limit": 5})), "src/a.rs:10-14");
        assert_eq!(ReadFile.summary(&json!({"path": "src/a.rs"})), "src/a.rs");
        let huge = json!({"path": "a", "offset": u64::MAX, "limit": u64::MAX});
        assert_eq!(ReadFile.summary(&huge), format!("a:{}-{}", u64::MAX, u64::MAX), "no overflow, no wrap");
        assert_eq!(WriteFile.summary(&json!({"path": "x", "content": "a\nb\n"})), "x (2 lines)");
        assert_eq!(
            EditFile.summary(&json!({"path": "x", "old_string": "a", "new_string": "b", "replace_all": true})),
            "x (replace all)"
        );
    }
}
