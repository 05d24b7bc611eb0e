//! Provider keys out of every command's reach (DESIGN §6). `/proc/<pid>/environ` shows the
//! environment a process was *started* with, whatever `unsetenv` does later, and any
//! process of the same user may read it. So when a key is in the environment, talaria
//! re-executes itself at once without it, handing the keys to its new self over an
//! inherited pipe that is read and closed before anything else runs.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// Names the inherited pipe's descriptor in the re-executed process.
pub(crate) const KEY_FD_ENV: &str = "TALARIA_KEY_FD";
/// Keys larger than this together are not handed over (the pipe must not fill before exec).
const MAX_PAYLOAD: usize = 32 * 1024;

static KEYS: OnceLock<HashMap<String, String>> = OnceLock::new();

/// Call first thing in `main`, while the process has one thread. Returns once the process
/// environment holds none of `names`: at once when it held none, else in the re-executed
/// process. If the re-exec fails, the keys are removed from the environment in place (commands
/// still never see them; `/proc/<pid>/environ` then still would) and a warning is printed.
pub fn drop_keys_from_environment(names: &[String]) {
    if let Some(fd) = std::env::var_os(KEY_FD_ENV) {
        std::env::remove_var(KEY_FD_ENV);
        let keys = fd.to_str().and_then(|s| s.parse::<i32>().ok()).map(read_handover).unwrap_or_default();
        let _ = KEYS.set(keys);
        return;
    }
    let found: HashMap<String, String> =
        names.iter().filter_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()).map(|v| (n.clone(), v))).collect();
    if found.is_empty() {
        let _ = KEYS.set(found);
        return;
    }
    match reexec_without(&found) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("talaria: could not restart without the API key in the environment ({e}); continuing");
            for name in found.keys() {
                std::env::remove_var(name);
            }
            let _ = KEYS.set(found);
        }
    }
}

/// A sub-agent (`talaria __agent`) gets its keys from its parent over stdin, not from the
/// environment: keep them, and drop `names` from the environment in place (the supervisor
/// already removed them; a re-exec would lose what stdin has buffered).
pub fn install(keys: HashMap<String, String>, names: &[String]) {
    for name in names {
        std::env::remove_var(name);
    }
    let _ = KEYS.set(keys);
}

/// Every key talaria holds (what a sub-agent is handed).
pub(crate) fn held() -> HashMap<String, String> {
    KEYS.get().cloned().unwrap_or_default()
}

/// A key by variable name: the handed-over keys first, then the environment.
pub fn get(name: &str) -> Option<String> {
    KEYS.get().and_then(|k| k.get(name).cloned()).or_else(|| std::env::var(name).ok()).filter(|v| !v.is_empty())
}

enum Never {}

fn reexec_without(keys: &HashMap<String, String>) -> std::io::Result<Never> {
    use std::os::unix::process::CommandExt;
    let mut payload = Vec::new();
    for (name, value) in keys {
        payload.extend_from_slice(name.as_bytes());
        payload.push(0);
        payload.extend_from_slice(value.as_bytes());
        payload.push(0);
    }
    if payload.len() > MAX_PAYLOAD {
        return Err(std::io::Error::other("the keys are too large to hand over"));
    }
    // Without O_CLOEXEC: the read end must survive exec.
    let (read_end, write_end) = nix::unistd::pipe()?;
    std::fs::File::from(write_end).write_all(&payload)?;
    let exe = std::env::current_exe()?;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("talaria"));
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(arg0).args(args);
    for name in keys.keys() {
        cmd.env_remove(name);
    }
    {
        use std::os::fd::AsRawFd;
        cmd.env(KEY_FD_ENV, read_end.as_raw_fd().to_string());
    }
    let err = cmd.exec();
    drop(read_end);
    Err(err)
}

fn read_handover(fd: i32) -> HashMap<String, String> {
    // Only a pipe is read: a stray TALARIA_KEY_FD=0 must not make talaria read its stdin.
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills `stat` or fails; nothing else is touched.
    let is_pipe = unsafe { libc::fstat(fd, stat.as_mut_ptr()) } == 0
        // SAFETY: fstat succeeded, so `stat` is initialised.
        && unsafe { stat.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFIFO;
    if fd < 3 || !is_pipe {
        return HashMap::new();
    }
    // SAFETY: the descriptor was inherited from our previous self for this purpose only.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut buf = Vec::new();
    if Read::by_ref(&mut file).take(MAX_PAYLOAD as u64).read_to_end(&mut buf).is_err() {
        return HashMap::new();
    }
    let mut parts = buf.split(|b| *b == 0);
    let mut keys = HashMap::new();
    while let (Some(name), Some(value)) = (parts.next(), parts.next()) {
        if name.is_empty() {
            break;
        }
        keys.insert(String::from_utf8_lossy(name).into_owned(), String::from_utf8_lossy(value).into_owned());
    }
    keys
}

/// `text` with secrets replaced by `[redacted]`: the provider keys talaria holds, the
/// `user:password@` part of any URL, `Bearer` tokens and `sk-…` key-shaped words. Applied to
/// provider error bodies and URLs before they are shown or logged (a 401 may echo the key).
pub(crate) fn redact(text: &str) -> String {
    let mut out = text.to_string();
    if let Some(keys) = KEYS.get() {
        for value in keys.values().filter(|v| v.len() >= 8) {
            out = out.replace(value.as_str(), "[redacted]");
        }
    }
    out = redact_userinfo(&out);
    redact_tokens(&out)
}

/// `scheme://user:pass@host` → `scheme://[redacted]@host`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail.find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"');
        let authority = &tail[..authority_end.unwrap_or(tail.len())];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("[redacted]");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority.len()..];
    }
    out.push_str(rest);
    out
}

/// `Bearer <token>` and words that look like API keys (`sk-…`, `sk_…`, 20+ characters).
fn redact_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut bearer = false;
    for (i, word) in text.split_inclusive(|c: char| c.is_whitespace() || c == '"' || c == '\'').enumerate() {
        let trimmed = word.trim_end_matches(|c: char| c.is_whitespace() || c == '"' || c == '\'');
        let tail = &word[trimmed.len()..];
        let key_like = (trimmed.starts_with("sk-") || trimmed.starts_with("sk_")) && trimmed.len() >= 20;
        if (bearer && !trimmed.is_empty()) || key_like {
            out.push_str("[redacted]");
            out.push_str(tail);
        } else {
            out.push_str(word);
        }
        bearer = trimmed.eq_ignore_ascii_case("bearer") || (bearer && trimmed.is_empty() && i > 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;
    use pretty_assertions::assert_eq;

    #[test]
    fn keys_credentials_in_urls_and_bearer_tokens_are_redacted() {
        assert_eq!(
            redact("Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwxyz. See https://x"),
            "Incorrect API key provided: [redacted] See https://x"
        );
        assert_eq!(
            redact("error sending request for url (http://bob:hunter2@127.0.0.1:9/v1/chat)"),
            "error sending request for url (http://[redacted]@127.0.0.1:9/v1/chat)"
        );
        assert_eq!(redact("Authorization: Bearer abc.def-ghi rest"), "Authorization: Bearer [redacted] rest");
        assert_eq!(redact("plain text, http://host/path"), "plain text, http://host/path");
    }
}
