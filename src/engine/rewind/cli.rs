//! `talaria rewind list` and `talaria rewind <n>` from a shell, like `talaria jobs`: the
//! session defaults to the last one in this directory (as `talaria -c` picks it).

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{Timeline, Workspace};
use crate::config::Config;
use crate::engine::store::Store;
use crate::paths::Paths;
use crate::protocol::rewind::{points_text, preview_text, RewindMode};

/// What was asked.
#[derive(Debug, Clone)]
pub enum RewindCli {
    List,
    To { n: usize, mode: RewindMode, yes: bool, include_user: bool },
}

/// Run it; the exit code (1: `<n>` without `--yes`, which only says what it would do).
pub async fn run(
    paths: &Paths,
    config: &Config,
    store: &Store,
    session: Option<String>,
    action: RewindCli,
    json: bool,
) -> anyhow::Result<i32> {
    let cwd: PathBuf = std::env::current_dir().context("cannot read the working directory")?;
    let cwd = cwd.canonicalize().unwrap_or(cwd);
    let summary = match &session {
        Some(key) => store
            .find_session(key)
            .await?
            .with_context(|| format!("no session matches '{key}' (talaria sessions list)"))?,
        None => store
            .latest_in_cwd(&cwd.display().to_string())
            .await?
            .with_context(|| format!("no session in {} (talaria sessions list; --session <id>)", cwd.display()))?,
    };
    let data = paths.state_db.parent().map(Path::to_path_buf).context("no data directory")?;
    let workspace = PathBuf::from(&summary.cwd);
    let max = config.rewind.max_file_bytes;
    let sid = summary.id.clone();
    let ws = tokio::task::spawn_blocking(move || Workspace::open(&data, &workspace, max)).await??;
    let journal = ws.journal(&sid);
    match action {
        RewindCli::List => {
            let (ws2, j2) = (ws.clone(), journal.clone());
            let points = tokio::task::spawn_blocking(move || Timeline::load(&ws2, &j2)?.points(&ws2)).await??;
            if json {
                println!("{}", serde_json::to_string(&serde_json::json!({ "session": sid, "turns": points }))?);
            } else {
                println!("session {sid} ({})", summary.cwd);
                println!("{}", crate::text::for_terminal(&points_text(&points, &[])));
            }
            Ok(0)
        }
        RewindCli::To { n, mode, yes, include_user } => {
            let (ws2, j2) = (ws.clone(), journal.clone());
            let (plan, preview, seq, tl) = tokio::task::spawn_blocking(move || {
                let tl = Timeline::load(&ws2, &j2)?;
                let (plan, preview) = tl.preview(&ws2, n, mode, include_user)?;
                let seq = tl.entries[tl.index_of(n)?].seq;
                Ok::<_, super::RewindError>((plan, preview, seq, tl))
            })
            .await??;
            println!("{}", crate::text::for_terminal(&preview_text(&preview)));
            if !yes {
                println!("(nothing changed: add --yes to do it)");
                return Ok(1);
            }
            let (ws2, j2, plan2) = (ws.clone(), journal.clone(), plan.clone());
            tokio::task::spawn_blocking(move || tl.apply(&ws2, &j2, n, mode, &plan2)).await??;
            let mut said = Vec::new();
            if mode.restores_code() {
                said.push(format!("put back {} path(s)", plan.steps.len()));
            }
            if let (true, Some(seq)) = (mode.restores_conversation(), seq) {
                store.deactivate_from(&sid, seq).await?;
                said.push("the conversation is back to before it".to_string());
            }
            println!(
                "rewound to before {n}: {} (talaria rewind list shows this rewind; rewinding to it undoes it)",
                said.join("; ")
            );
            Ok(0)
        }
    }
}
