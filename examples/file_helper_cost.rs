//! What the sandboxed file helper (`talaria __fs`, engine/tools/fs_helper.rs) costs per
//! call: `read_file` of a small file and `search_files` over this repository, done in the
//! process ("before": how the tools ran until #28) and through the warm helper under the
//! session's sandbox ("after"). Prints a Markdown table for BENCHMARKS.md.
//!
//! `cargo run --example file_helper_cost [runs]` from the repository root. The example is
//! its own helper: run with `__fs` it serves requests, as the talaria binary does.

use std::path::Path;
use std::time::{Duration, Instant};

use talaria::engine::sandbox::Policy;
use talaria::engine::tools::fs_helper::{self, Request};
use talaria::engine::tools::{files, search};

fn main() {
    if std::env::args().nth(1).as_deref() == Some(fs_helper::ARG) {
        fs_helper::run();
    }
    let runs: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200);
    let repo = std::fs::canonicalize(".").expect("the current directory");
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let paths = talaria::paths::Paths::under(Path::new("/nonexistent/talaria"));
    let policy = Policy::from_config(&talaria::config::SandboxConfig::default(), &repo, &paths, home.as_deref());
    assert!(
        matches!(talaria::engine::sandbox::support(), talaria::engine::sandbox::Support::Available { .. }),
        "the kernel sandbox is not active here; nothing to measure"
    );
    let small = repo.join("Cargo.toml");
    let read = Request::Read { path: small.clone(), offset: None, limit: None, max_chars: 50_000 };
    let search =
        Request::Search { root: repo.clone(), pattern: "fn main".into(), glob: Some("*.rs".into()), max_chars: 50_000 };
    let never = tokio_util::sync::CancellationToken::new();
    // The first call starts the helper: measured apart.
    let start = Instant::now();
    assert!(fs_helper::call_blocking(&policy, &read).ok);
    let first = start.elapsed();

    let rows = [
        (
            "read_file Cargo.toml, in talaria (before)",
            measure(runs, || files::read_file_at(&small, None, None, 50_000).ok),
        ),
        ("read_file Cargo.toml, warm helper (after)", measure(runs, || fs_helper::call_blocking(&policy, &read).ok)),
        (
            "search_files `fn main` *.rs over the repo, in talaria (before)",
            measure(runs / 10, || search::search_at(&repo, "fn main", Some("*.rs"), 50_000, &never).ok),
        ),
        (
            "search_files `fn main` *.rs over the repo, warm helper (after)",
            measure(runs / 10, || fs_helper::call_blocking(&policy, &search).ok),
        ),
    ];
    println!("| call | runs | p50 | p90 | max |");
    println!("|---|---|---|---|---|");
    for (what, (n, [p50, p90, max])) in rows {
        println!("| {what} | {n} | {} | {} | {} |", ms(p50), ms(p90), ms(max));
    }
    println!("\nfirst call (starts the helper under Landlock, seccomp and the git-guard mounts): {}", ms(first));
}

fn measure(runs: usize, mut call: impl FnMut() -> bool) -> (usize, [Duration; 3]) {
    let runs = runs.max(5);
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            assert!(call(), "the call failed");
            start.elapsed()
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((runs as f64 * q).ceil() as usize).clamp(1, runs) - 1];
    (runs, [at(0.5), at(0.9), times[runs - 1]])
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
