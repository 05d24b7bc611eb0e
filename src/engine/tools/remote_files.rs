//! The file tools on a remote backend (DESIGN §4b): `read_file`, `write_file`, `edit_file`
//! and `search_files` act on the ssh host or in the container, through short POSIX-sh
//! scripts over the same transport as commands (the warm master connection). The text
//! handling (numbering, caps, binary refusal, the edit itself) is the local tools'. Writes
//! run with the remote user's rights, outside talaria's sandbox: they are approved like an
//! unsandboxed command.

use std::time::Duration;

use serde_json::{json, Value};

use super::files::{self, Edit};
use super::{ToolCtx, ToolResult};
use crate::engine::approval::Verdict;
use crate::engine::backend::{remote, Backend};
use crate::engine::jobs::sh_quote;
use crate::protocol::ToolStatus;

/// How long one file operation may take over the transport.
const FILE_OP_LIMIT: Duration = Duration::from_secs(60);

/// A path argument as a remote shell expression, and as shown to the model.
fn remote_path(ctx: &ToolCtx, backend: &Backend, path: &str) -> (String, String) {
    let cwd = ctx.jobs.backends().remote_cwd(backend);
    let full = if path.starts_with('/') || path == "~" || path.starts_with("~/") || cwd.is_empty() {
        path.to_string()
    } else {
        format!("{}/{path}", cwd.trim_end_matches('/'))
    };
    (remote::remote_path_expr(&full), full)
}

fn degraded(ctx: &ToolCtx, backend: &Backend, d: crate::engine::backend::Degraded) -> ToolResult {
    ToolResult {
        value: d.to_value(&ctx.config, backend),
        ok: false,
        exit_code: Some(-1),
        status: Some(d.tool_status(&ctx.config)),
    }
}

/// Exit codes of the read script.
const MISSING: i32 = 20;
const IS_DIR: i32 = 21;
const NOT_REGULAR: i32 = 22;
const TOO_BIG: i32 = 23;

fn read_script(expr: &str) -> String {
    format!(
        r#"f={expr}
[ -e "$f" ] || exit {MISSING}
[ -d "$f" ] && exit {IS_DIR}
[ -f "$f" ] || exit {NOT_REGULAR}
n=$(wc -c < "$f" | tr -d ' ')
[ "$n" -gt {max} ] && exit {TOO_BIG}
cat -- "$f""#,
        max = files::MAX_FILE_BYTES
    )
}

/// The bytes of a remote text file, or the tool result that says why not.
async fn fetch(ctx: &ToolCtx, backend: &Backend, expr: &str, shown: &str) -> Result<Vec<u8>, ToolResult> {
    let out = ctx
        .jobs
        .backends()
        .run_script(backend, &read_script(expr), None, FILE_OP_LIMIT)
        .await
        .map_err(|d| degraded(ctx, backend, d))?;
    let message = match out.code {
        0 => {
            if out.stdout.contains(&0) {
                format!("{shown} looks like a binary file (it contains NUL bytes); these tools only handle text")
            } else {
                return Ok(out.stdout);
            }
        }
        MISSING => format!("{shown} does not exist on {backend}; check the path (relative paths start from the remote working directory)"),
        IS_DIR => format!("{shown} is a directory on {backend}, not a file; use search_files or the terminal (ls)"),
        NOT_REGULAR => format!("{shown} is not a regular file (a FIFO, socket or device); file tools only read regular files"),
        TOO_BIG => format!(
            "{shown} is over the {} MiB limit for reading a whole file; use search_files or the terminal",
            files::MAX_FILE_BYTES / (1024 * 1024)
        ),
        code => format!("cannot read {shown} on {backend} (exit {code}): {}", out.stderr.trim()),
    };
    Err(ToolResult::error(message))
}

pub(crate) async fn read_file(
    ctx: &ToolCtx,
    backend: &Backend,
    path: &str,
    offset: Option<u64>,
    limit: Option<u64>,
) -> ToolResult {
    let (expr, shown) = remote_path(ctx, backend, path);
    let bytes = match fetch(ctx, backend, &expr, &shown).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let max_chars = ctx.config.tool_output.max_chars.max(1_000);
    let mut result = files::render_read(&bytes, &shown, offset, limit, max_chars);
    result.value["backend"] = json!(backend.label());
    result
}

/// Ask for a remote write like an unsandboxed command.
async fn approve(ctx: &ToolCtx, backend: &Backend, shown: &str, what: &str) -> Result<Option<String>, ToolResult> {
    let described = format!("{what} {} # on {backend}", sh_quote(shown));
    match ctx.approvals.check_command(&described, false, &ctx.signals.interrupt).await {
        Verdict::Allowed { note, .. } => Ok(note),
        Verdict::Denied { reason } => Err(ToolResult {
            value: json!({ "error": format!("Writing {shown} on {backend} was not allowed: {reason}"), "status": "denied" }),
            ok: false,
            exit_code: None,
            status: Some(ToolStatus::Denied),
        }),
    }
}

/// Write `content` to the remote file (in place, parents created). Ok(created).
async fn put(ctx: &ToolCtx, backend: &Backend, expr: &str, shown: &str, content: &str) -> Result<bool, ToolResult> {
    let script = format!(
        r#"f={expr}
[ -d "$f" ] && exit {IS_DIR}
[ -e "$f" ] && [ ! -f "$f" ] && exit {NOT_REGULAR}
new=0; [ -e "$f" ] || new=1
mkdir -p -- "$(dirname -- "$f")" || exit 1
cat > "$f" || exit 1
echo $new"#
    );
    let out = ctx
        .jobs
        .backends()
        .run_script(backend, &script, Some(content.as_bytes().to_vec()), FILE_OP_LIMIT)
        .await
        .map_err(|d| degraded(ctx, backend, d))?;
    match out.code {
        0 => Ok(String::from_utf8_lossy(&out.stdout).trim() == "1"),
        IS_DIR => Err(ToolResult::error(format!("{shown} is a directory on {backend}; give a file path"))),
        NOT_REGULAR => {
            Err(ToolResult::error(format!("{shown} is not a regular file; file tools only write regular files")))
        }
        code => {
            Err(ToolResult::error(format!("cannot write {shown} on {backend} (exit {code}): {}", out.stderr.trim())))
        }
    }
}

pub(crate) async fn write_file(ctx: &ToolCtx, backend: &Backend, path: &str, content: &str) -> ToolResult {
    let (expr, shown) = remote_path(ctx, backend, path);
    let note = match approve(ctx, backend, &shown, "write_file").await {
        Ok(n) => n,
        Err(r) => return r,
    };
    let created = match put(ctx, backend, &expr, &shown, content).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let mut value = json!({
        "status": "ok",
        "path": shown,
        "bytes": content.len(),
        "lines": files::line_count(content),
        "created": created,
        "backend": backend.label(),
    });
    if let Some(note) = note {
        value["approval"] = json!(note);
    }
    ToolResult::ok(value)
}

pub(crate) async fn edit_file(ctx: &ToolCtx, backend: &Backend, path: &str, edit: &Edit) -> ToolResult {
    let (expr, shown) = remote_path(ctx, backend, path);
    let prepare = |bytes: Vec<u8>| -> Result<files::Edited, String> {
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{shown} is not valid UTF-8 text; edit_file only edits UTF-8 files"))?;
        files::apply_edit(&text, edit, &shown)
    };
    let bytes = match fetch(ctx, backend, &expr, &shown).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(message) = prepare(bytes) {
        return ToolResult::error(message);
    }
    let note = match approve(ctx, backend, &shown, "edit_file").await {
        Ok(n) => n,
        Err(r) => return r,
    };
    // The file may have changed while the approval waited: edit what is there now.
    let bytes = match fetch(ctx, backend, &expr, &shown).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let edited = match prepare(bytes) {
        Ok(e) => e,
        Err(message) => return ToolResult::error(message),
    };
    if let Err(r) = put(ctx, backend, &expr, &shown, &edited.content).await {
        return r;
    }
    let mut value = json!({
        "status": "ok",
        "path": shown,
        "replacements": edited.replacements,
        "line": edited.first_line,
        "snippet": files::edit_snippet(&edited.content, edited.first_line, edit.new_string.lines().count().max(1)),
        "backend": backend.label(),
    });
    if let Some(note) = note {
        value["approval"] = json!(note);
    }
    ToolResult::ok(value)
}

/// `search_files` on the remote side: ripgrep when the host has it (it honours .gitignore),
/// else `grep -rnIE` (skipping hidden directories). Lines are `path:line:text`.
pub(crate) async fn search_files(
    ctx: &ToolCtx,
    backend: &Backend,
    pattern: &str,
    path: Option<&str>,
    glob: Option<&str>,
) -> ToolResult {
    if pattern.is_empty() {
        return ToolResult::error("pattern is empty; give a regular expression to search for");
    }
    let (expr, shown) = remote_path(ctx, backend, path.filter(|p| !p.trim().is_empty()).unwrap_or("."));
    let max = super::search::MAX_MATCHES;
    let mut rg_globs = String::new();
    let mut grep_globs = String::new();
    for g in glob.unwrap_or("").split(',').map(str::trim).filter(|g| !g.is_empty()) {
        rg_globs.push_str(&format!(" -g {}", sh_quote(g)));
        if let Some(neg) = g.strip_prefix('!') {
            grep_globs.push_str(&format!(" --exclude={}", sh_quote(neg)));
        } else {
            grep_globs.push_str(&format!(" --include={}", sh_quote(g)));
        }
    }
    let script = format!(
        r#"p={expr}
[ -e "$p" ] || exit {MISSING}
cd -- "$p" 2>/dev/null && p=.
if command -v rg >/dev/null 2>&1; then
  rg -n --no-heading --color never -e {pat}{rg_globs} -- "$p" 2>/dev/null | head -n {lim}
else
  grep -rnIE --exclude-dir='.?*'{grep_globs} -e {pat} -- "$p" 2>/dev/null | sed 's|^\./||' | head -n {lim}
fi
exit 0"#,
        pat = sh_quote(pattern),
        lim = max + 1,
    );
    let out = match ctx.jobs.backends().run_script(backend, &script, None, FILE_OP_LIMIT).await {
        Ok(o) => o,
        Err(d) => return degraded(ctx, backend, d),
    };
    if out.code == MISSING {
        return ToolResult::error(format!("{shown} does not exist on {backend}; check the path"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let l = l.strip_prefix("./").unwrap_or(l);
            if l.chars().count() > super::search::MAX_MATCH_LINE_CHARS {
                let cut: String = l.chars().take(super::search::MAX_MATCH_LINE_CHARS).collect();
                format!("{cut}… [{} chars]", l.chars().count())
            } else {
                l.to_string()
            }
        })
        .collect();
    let truncated = lines.len() > max;
    lines.truncate(max);
    let count = lines.len();
    let mut matches = lines.join("\n");
    let cap = ctx.config.tool_output.max_chars.max(1_000);
    if matches.chars().count() > cap {
        matches = crate::text::tail_chars(&matches, cap).to_string();
    }
    let mut value: Value =
        json!({ "matches": matches, "count": count, "truncated": truncated, "backend": backend.label() });
    if truncated {
        value["note"] = json!(format!(
            "Only the first {count} matches are shown; narrow the pattern, the path or the glob to see the rest."
        ));
    } else if count == 0 {
        value["note"] = json!(format!("No matches for {pattern:?} in {shown} on {backend}."));
    }
    ToolResult::ok(value)
}
