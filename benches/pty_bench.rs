//! Whole-program benchmark in a pseudo-terminal: Talaria against its peers.
//!
//! ```text
//! cargo bench --bench pty_bench -- [--runs 10] [--idle-secs 10] [--program NAME[=COMMAND ARGS...]]...
//! cargo bench --bench pty_bench -- --keystrokes 50 --runs 3 --program ...   # latency while streaming
//! scripts/bench-peers.sh [--keystrokes 50] # installs Codex CLI and Claude Code from npm, runs them all
//! ```
//!
//! Each run spawns the program in a fresh 120×40 PTY with a fresh temporary `HOME`, `XDG_*` dirs,
//! `TALARIA_HOME` and working directory (under /var/tmp; `--reuse-home` keeps one set per
//! program after a warm-up run), and an environment reduced to a short allow-list (so no API
//! keys: Talaria falls back to its demo model, peers show their sign-in screen). The driver
//! answers the terminal queries programs send at start-up (cursor position, device attributes,
//! OSC 10/11/4 colours, kitty keyboard flags, DECRQM, XTVERSION, window size, XTGETTCAP) the way a
//! modern terminal would, and measures over the whole process tree — descendants, the session, and
//! daemons that inherited the run's `PTY_BENCH_RUN` variable (a Node launcher in front of a native
//! binary counts, and so does Codex's app-server daemon):
//!
//! 1. time from spawn to first frame: the moment the read returns the output chunk after which
//!    the screen first holds at least `--min-chars` visible non-blank characters (no settle wait);
//! 2. RSS (sum of VmRSS over the tree) `--rss-delay-secs` after the first frame;
//! 3. CPU time (utime+stime, plus reaped children) and bytes written to the terminal during the
//!    `--idle-secs` that follow that sample, with no input sent.
//!
//! With `--keystrokes N` the RSS sample and idle window give way to keystroke-to-screen latency
//! while a model streams: a scripted server on 127.0.0.1 (`pty_bench/server.rs`) streams the same
//! long answer to every program in its wire format (Talaria: `--base-url`, OpenAI chat completions
//! or `--provider anthropic`; Codex CLI: a custom `[model_providers.pty_bench]` with
//! `wire_api = "responses"` in a temporary `CODEX_HOME`, the folder trusted; Claude Code:
//! `ANTHROPIC_BASE_URL` and a temporary `~/.claude.json` with onboarding, key and folder trust
//! done); the driver types a prompt and Enter, waits for the answer on screen, then types a
//! character found nowhere else on screen N times and times each from its write to the first
//! output chunk after which the screen shows it (min / p50 / p99 / max per program). The server is
//! also every program's HTTPS proxy and refuses anything not bound for loopback.
//!
//! Programs run round-robin (run 1 of each, then run 2 of each, ...) so load on a shared machine
//! spreads evenly. The report is Markdown on stdout (and in `--out FILE`).
//!
//! The default program is `talaria`, found through `CARGO_BIN_EXE_talaria`: cargo sets it for
//! integration tests and benchmarks and builds the binary first, with the bench profile (which
//! inherits `release`), so `cargo bench` measures `target/release/talaria`.
//!
//! A program that exits after its first frame (Claude Code offline) keeps its first-frame time;
//! the report says which later figures lack it and shows its last screen.
//!
//! Run without `--bench` (as `cargo test --benches` does) it only checks its terminal-query
//! answers and its parsing helpers, and exits.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};

#[path = "pty_bench/server.rs"]
mod server;

/// Environment variables passed through to the measured program; everything else (API keys,
/// tokens, CI markers, the caller's config dirs) is dropped.
const ENV_ALLOW: &[&str] = &["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR"];

const USAGE: &str = "\
usage: cargo bench --bench pty_bench -- [options]

  --program NAME[=COMMAND [ARGS...]]  program to measure (repeatable; COMMAND is split on
                                      whitespace). `--program talaria` alone means the binary
                                      cargo built. Default: talaria only.
  --home-file NAME:PATH=CONTENT       write CONTENT to HOME/PATH before each start of NAME
                                      (e.g. a peer's onboarding-done flag)
  --note NAME=TEXT                    a line printed under NAME's results (e.g. version, what
                                      its first frame shows)
  --baseline NAME                     ratios in the comparison are other / NAME (default talaria)
  --runs N                            runs per program (default 10)
  --idle-secs S                       idle window for CPU time and bytes written (default 10)
  --rss-delay-secs S                  RSS sample this long after the first frame (default 2)
  --cols C --rows R                   PTY size (default 120x40)
  --min-chars K                       visible non-blank characters that make a first frame (default 20)
  --timeout-secs S                    give up on a run without a first frame after S (default 60)
  --out FILE                          also write the Markdown report to FILE
  --quick                             3 runs, 3 s idle (later options still override)
  FILTER                              measure only programs whose pty_bench/NAME contains FILTER
  --reuse-home                        keep one HOME/TALARIA_HOME/cwd per program across its runs,
                                      after one unmeasured warm-up run (default: fresh per run)
  --scratch-dir DIR                   where the per-run HOME, TALARIA_HOME and cwd are made
                                      (default /var/tmp; not /tmp, where Codex prints a warning)
  --save-output DIR                   keep each run's raw terminal output as DIR/NAME-RUN.out and
                                      the final screen as DIR/NAME-RUN.screen (for diagnosis)

Keystroke latency while a model streams (instead of the RSS sample and idle window):
  --keystrokes N                      after the first frame, type a prompt + Enter, wait until the
                                      answer (streamed by a scripted server on 127.0.0.1) is on
                                      screen, then type N times a character found nowhere else
                                      ('\u{2ac}') and time each from the write to the first output
                                      chunk after which the screen shows it (default 0: off)
  --key-interval-ms MS                pause between an echo (or its timeout) and the next key (default 75)
  --key-timeout-ms MS                 give up on one key's echo after MS (default 2000)
  --stream-secs S                     how long the scripted answer streams (default 30)
  --stream-interval-ms MS             one piece of the answer every MS (default 20)
  --words-per-piece W                 words in each piece (default 3)
  --driver NAME=KIND                  how to point NAME at the server: talaria (OpenAI chat
                                      completions), talaria-anthropic (Messages API), codex
                                      (Responses API, custom provider in a temporary CODEX_HOME),
                                      claude (ANTHROPIC_BASE_URL, temporary HOME/.claude.json);
                                      default: guessed from NAME, then from the command
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // cargo passes `--bench` when benchmarking; `cargo test --benches` does not.
    if !args.iter().any(|a| a == "--bench") {
        match self_check() {
            Ok(()) => {
                println!("pty_bench: terminal-query answers check out; run `cargo bench --bench pty_bench` to measure");
                return;
            }
            Err(e) => {
                eprintln!("pty_bench self-check failed: {e}");
                std::process::exit(1);
            }
        }
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return;
    }
    let opts = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pty_bench: {e}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if opts.programs.is_empty() {
        eprintln!("pty_bench: no program matches the filter; nothing to measure");
        return;
    }
    if let Err(e) = run(&opts, &args) {
        eprintln!("pty_bench: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Debug, Clone)]
struct ProgramSpec {
    name: String,
    argv: Vec<String>,
}

#[derive(Debug)]
struct Options {
    programs: Vec<ProgramSpec>,
    notes: HashMap<String, Vec<String>>,
    /// Files written into a program's HOME before it starts: name -> [(relative path, content)].
    home_files: HashMap<String, Vec<(PathBuf, String)>>,
    baseline: String,
    runs: usize,
    idle: Duration,
    rss_delay: Duration,
    cols: u16,
    rows: u16,
    min_chars: usize,
    timeout: Duration,
    out: Option<PathBuf>,
    save_output: Option<PathBuf>,
    reuse_home: bool,
    scratch_dir: PathBuf,
    /// Keystrokes per run; 0 = the start-up measurement only.
    keystrokes: usize,
    key_interval: Duration,
    key_timeout: Duration,
    stream_secs: f64,
    stream_interval: Duration,
    words_per_piece: usize,
    drivers: HashMap<String, Driver>,
}

fn default_talaria() -> ProgramSpec {
    ProgramSpec { name: "talaria".into(), argv: vec![env!("CARGO_BIN_EXE_talaria").into()] }
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            programs: Vec::new(),
            notes: HashMap::new(),
            home_files: HashMap::new(),
            baseline: "talaria".into(),
            runs: 10,
            idle: Duration::from_secs(10),
            rss_delay: Duration::from_secs(2),
            cols: 120,
            rows: 40,
            min_chars: 20,
            timeout: Duration::from_secs(60),
            out: None,
            save_output: None,
            reuse_home: false,
            scratch_dir: default_scratch_dir(),
            keystrokes: 0,
            key_interval: Duration::from_millis(75),
            key_timeout: Duration::from_millis(2000),
            stream_secs: 30.0,
            stream_interval: Duration::from_millis(20),
            words_per_piece: 3,
            drivers: HashMap::new(),
        };
        let mut filters: Vec<String> = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (arg.as_str(), None),
            };
            let mut value = || -> Result<String, String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it.next().cloned().ok_or_else(|| format!("{flag} needs a value")),
                }
            };
            match flag {
                "--bench" => {}
                "--program" => o.programs.push(parse_program(&value()?)?),
                "--note" => {
                    let v = value()?;
                    let (name, text) = v.split_once('=').ok_or_else(|| format!("--note wants NAME=TEXT, got {v:?}"))?;
                    o.notes.entry(name.to_string()).or_default().push(text.to_string());
                }
                "--home-file" => {
                    let v = value()?;
                    let parsed = v.split_once(':').and_then(|(name, rest)| Some((name, rest.split_once('=')?)));
                    let Some((name, (path, content))) = parsed else {
                        return Err(format!("--home-file wants NAME:RELATIVE/PATH=CONTENT, got {v:?}"));
                    };
                    let path = PathBuf::from(path);
                    if path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
                        return Err(format!("--home-file: {} must be relative and stay inside HOME", path.display()));
                    }
                    o.home_files.entry(name.to_string()).or_default().push((path, content.to_string()));
                }
                "--baseline" => o.baseline = value()?,
                "--runs" => o.runs = parse_num(flag, &value()?)?,
                "--idle-secs" => o.idle = parse_secs(flag, &value()?)?,
                "--rss-delay-secs" => o.rss_delay = parse_secs(flag, &value()?)?,
                "--cols" => o.cols = parse_num(flag, &value()?)?,
                "--rows" => o.rows = parse_num(flag, &value()?)?,
                "--min-chars" => o.min_chars = parse_num(flag, &value()?)?,
                "--timeout-secs" => o.timeout = parse_secs(flag, &value()?)?,
                "--out" => o.out = Some(PathBuf::from(value()?)),
                "--reuse-home" => o.reuse_home = true,
                "--scratch-dir" => o.scratch_dir = PathBuf::from(value()?),
                "--save-output" => o.save_output = Some(PathBuf::from(value()?)),
                "--keystrokes" => o.keystrokes = parse_num(flag, &value()?)?,
                "--key-interval-ms" => o.key_interval = Duration::from_millis(parse_num(flag, &value()?)?),
                "--key-timeout-ms" => o.key_timeout = Duration::from_millis(parse_num(flag, &value()?)?),
                "--stream-secs" => o.stream_secs = parse_num(flag, &value()?)?,
                "--stream-interval-ms" => o.stream_interval = Duration::from_millis(parse_num(flag, &value()?)?),
                "--words-per-piece" => o.words_per_piece = parse_num(flag, &value()?)?,
                "--driver" => {
                    let v = value()?;
                    let (name, kind) =
                        v.split_once('=').ok_or_else(|| format!("--driver wants NAME=KIND, got {v:?}"))?;
                    o.drivers.insert(name.to_string(), Driver::parse(kind)?);
                }
                // criterion's quick mode, for `cargo bench -- --quick` over every bench
                "--quick" => {
                    o.runs = 3;
                    o.idle = Duration::from_secs(3);
                }
                other if !other.starts_with('-') => filters.push(other.to_string()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if o.programs.is_empty() {
            o.programs.push(default_talaria());
        }
        // Like criterion's name filters (`cargo bench NAME` passes NAME to every bench): keep the
        // programs whose `pty_bench/NAME` contains one of them; none left means nothing to do.
        if !filters.is_empty() {
            o.programs.retain(|p| filters.iter().any(|f| format!("pty_bench/{}", p.name).contains(f.as_str())));
        }
        if o.runs == 0 || o.cols == 0 || o.rows == 0 {
            return Err("--runs, --cols and --rows must be at least 1".into());
        }
        if o.keystrokes > 0
            && (o.words_per_piece == 0
                || !o.stream_secs.is_finite()
                || o.stream_secs <= 0.0
                || o.stream_interval.is_zero())
        {
            return Err("--stream-secs, --stream-interval-ms and --words-per-piece must be above 0".into());
        }
        let mut seen = HashSet::new();
        for p in &o.programs {
            if !seen.insert(p.name.as_str()) {
                return Err(format!("program {:?} is given twice", p.name));
            }
            let exe = Path::new(&p.argv[0]);
            if exe.components().count() > 1 && !exe.exists() {
                return Err(format!("{}: {} does not exist", p.name, exe.display()));
            }
        }
        Ok(o)
    }
}

/// Not /tmp: Codex refuses to set up its helpers under the system temp dir and prints a warning
/// before its first frame there. Not inside this repository either: peers would take it for the
/// project they were started in.
fn default_scratch_dir() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    }
}

fn parse_secs(flag: &str, v: &str) -> Result<Duration, String> {
    let secs: f64 = parse_num(flag, v)?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{flag}: {v:?} is not a number of seconds >= 0"))
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

fn parse_program(spec: &str) -> Result<ProgramSpec, String> {
    match spec.split_once('=') {
        None if spec == "talaria" => Ok(default_talaria()),
        None => Err(format!("--program wants NAME=COMMAND (only `talaria` may omit it), got {spec:?}")),
        Some((name, cmd)) => {
            let argv: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if name.is_empty() || argv.is_empty() {
                return Err(format!("--program wants NAME=COMMAND, got {spec:?}"));
            }
            Ok(ProgramSpec { name: name.to_string(), argv })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pointing each program at the scripted server (`--keystrokes`)

/// How a program is pointed at the scripted model server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Driver {
    /// `--base-url …/v1 --model M`: OpenAI chat completions.
    Talaria,
    /// `--provider anthropic --base-url …/v1 --model M`: the native Messages client.
    TalariaAnthropic,
    /// A custom `[model_providers.pty_bench]` (Responses API) in a temporary `CODEX_HOME`.
    Codex,
    /// `ANTHROPIC_BASE_URL` and a temporary `HOME/.claude.json`.
    Claude,
}

impl Driver {
    fn parse(kind: &str) -> Result<Driver, String> {
        match kind {
            "talaria" => Ok(Driver::Talaria),
            "talaria-anthropic" => Ok(Driver::TalariaAnthropic),
            "codex" => Ok(Driver::Codex),
            "claude" => Ok(Driver::Claude),
            other => Err(format!("unknown driver {other:?} (talaria, talaria-anthropic, codex, claude)")),
        }
    }

    /// `--driver` first, then the program's name, then its command.
    fn of(spec: &ProgramSpec, opts: &Options) -> Option<Driver> {
        if let Some(d) = opts.drivers.get(&spec.name) {
            return Some(*d);
        }
        let guess = |s: &str| {
            let s = s.to_ascii_lowercase();
            if s.contains("codex") {
                Some(Driver::Codex)
            } else if s.contains("claude") {
                Some(Driver::Claude)
            } else if s.contains("talaria") {
                Some(if s.contains("anthropic") { Driver::TalariaAnthropic } else { Driver::Talaria })
            } else {
                None
            }
        };
        guess(&spec.name).or_else(|| guess(&spec.argv.join(" ")))
    }
}

/// The dummy key the peers send to the scripted server.
const DUMMY_KEY: &str = "sk-pty-bench-0000000000000000000000000000";
/// The variable Codex reads the key from (`env_key`).
const CODEX_KEY_ENV: &str = "PTY_BENCH_API_KEY";

/// Points one run of `spec` at the server: arguments, environment and files in its temporary
/// HOME. Returns how, for the report.
fn drive(driver: Driver, s: &Scratch, base: &str, cmd: &mut CommandBuilder) -> Result<String, String> {
    let write = |path: &Path, content: &str| {
        path.parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(path, content))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    // Anything that is not loopback goes to the server's proxy side, which refuses and logs it.
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        cmd.env(key, base);
    }
    for key in ["NO_PROXY", "no_proxy"] {
        cmd.env(key, "127.0.0.1,localhost");
    }
    let work = s.work.canonicalize().unwrap_or_else(|_| s.work.clone());
    let work = work.display().to_string();
    Ok(match driver {
        Driver::Talaria | Driver::TalariaAnthropic => {
            if driver == Driver::TalariaAnthropic {
                cmd.args(["--provider", "anthropic"]);
            }
            cmd.args(["--base-url", &format!("{base}/v1"), "--model", server::MODEL]);
            format!(
                "`{}--base-url {base}/v1 --model {}` ({}), fresh TALARIA_HOME",
                if driver == Driver::TalariaAnthropic { "--provider anthropic " } else { "" },
                server::MODEL,
                if driver == Driver::TalariaAnthropic { "Anthropic Messages" } else { "OpenAI chat completions" }
            )
        }
        Driver::Codex => {
            let codex_home = s.home.join(".codex");
            let config = format!(
                "model = \"{model}\"\nmodel_provider = \"pty_bench\"\ncheck_for_update_on_startup = false\n\n\
                 [model_providers.pty_bench]\nname = \"pty_bench\"\nbase_url = \"{base}/v1\"\n\
                 wire_api = \"responses\"\nenv_key = \"{CODEX_KEY_ENV}\"\n\n\
                 [projects.\"{work}\"]\ntrust_level = \"trusted\"\n",
                model = server::MODEL
            );
            write(&codex_home.join("config.toml"), &config)?;
            cmd.env("CODEX_HOME", &codex_home);
            cmd.env(CODEX_KEY_ENV, DUMMY_KEY);
            format!(
                "temporary CODEX_HOME/config.toml: `model_provider = \"pty_bench\"`, \
                 `[model_providers.pty_bench] base_url = \"{base}/v1\", wire_api = \"responses\", \
                 env_key = \"{CODEX_KEY_ENV}\"` (set to a dummy key), the working folder `trust_level = \"trusted\"`, \
                 `check_for_update_on_startup = false`"
            )
        }
        Driver::Claude => {
            let path = s.home.join(".claude.json");
            // Merge into what `--home-file` wrote, if anything.
            let mut v: serde_json::Value = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            let tail: String = DUMMY_KEY.chars().skip(DUMMY_KEY.chars().count() - 20).collect();
            v["hasCompletedOnboarding"] = true.into();
            if v.get("theme").is_none() {
                v["theme"] = "dark".into();
            }
            v["customApiKeyResponses"] = serde_json::json!({"approved": [tail], "rejected": []});
            v["projects"][&work] = serde_json::json!({"hasTrustDialogAccepted": true, "allowedTools": []});
            write(&path, &v.to_string())?;
            cmd.env("ANTHROPIC_BASE_URL", base);
            cmd.env("ANTHROPIC_API_KEY", DUMMY_KEY);
            for key in [
                "DISABLE_AUTOUPDATER",
                "DISABLE_TELEMETRY",
                "DISABLE_ERROR_REPORTING",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            ] {
                cmd.env(key, "1");
            }
            format!(
                "`ANTHROPIC_BASE_URL={base}`, `ANTHROPIC_API_KEY` a dummy key, DISABLE_AUTOUPDATER / \
                 DISABLE_TELEMETRY / DISABLE_ERROR_REPORTING / CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = 1; \
                 temporary HOME/.claude.json: `hasCompletedOnboarding`, the key approved in \
                 `customApiKeyResponses`, `projects.<cwd>.hasTrustDialogAccepted`"
            )
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Terminal queries and the answers a modern terminal (xterm-like, dark background) gives

#[derive(Debug, Clone, PartialEq)]
enum Query {
    /// `CSI 6 n`
    CursorPosition,
    /// `CSI 5 n`
    DeviceStatus,
    /// `CSI c` / `CSI 0 c`
    PrimaryDa,
    /// `CSI > c`
    SecondaryDa,
    /// `CSI = c`
    TertiaryDa,
    /// `CSI ? u`
    KittyKeyboard,
    /// `CSI ? Pm $ p`
    DecMode(u16),
    /// `CSI Pm $ p`
    AnsiMode(u16),
    /// `CSI > q` (XTVERSION)
    XtVersion,
    /// `CSI 14/16/18 t`
    WindowReport(u16),
    /// `CSI ? 996 n` (colour-scheme preference)
    ColorScheme,
    /// `OSC 10/11/12 ; ?`
    DynamicColor { which: u16, bel: bool },
    /// `OSC 4 ; n ; ?`
    PaletteColor { index: u16, bel: bool },
    /// `DCS + q Pt ST` (XTGETTCAP)
    Termcap,
}

impl Query {
    fn label(&self) -> String {
        match self {
            Query::CursorPosition => "CPR".into(),
            Query::DeviceStatus => "DSR".into(),
            Query::PrimaryDa => "DA1".into(),
            Query::SecondaryDa => "DA2".into(),
            Query::TertiaryDa => "DA3".into(),
            Query::KittyKeyboard => "kitty-keyboard".into(),
            Query::DecMode(m) => format!("DECRQM ?{m}"),
            Query::AnsiMode(m) => format!("DECRQM {m}"),
            Query::XtVersion => "XTVERSION".into(),
            Query::WindowReport(n) => format!("XTWINOPS {n}"),
            Query::ColorScheme => "colour-scheme".into(),
            Query::DynamicColor { which, .. } => format!("OSC {which}"),
            Query::PaletteColor { .. } => "OSC 4".into(),
            Query::Termcap => "XTGETTCAP".into(),
        }
    }

    /// The reply; `cursor` is 0-based (row, col), `size` is (rows, cols).
    fn answer(&self, cursor: (u16, u16), size: (u16, u16)) -> Vec<u8> {
        let st = |bel: bool| if bel { "\x07" } else { "\x1b\\" };
        let s = match self {
            Query::CursorPosition => format!("\x1b[{};{}R", cursor.0 + 1, cursor.1 + 1),
            Query::DeviceStatus => "\x1b[0n".into(),
            Query::PrimaryDa => "\x1b[?62;22c".into(),
            Query::SecondaryDa => "\x1b[>1;10;0c".into(),
            Query::TertiaryDa => "\x1bP!|00000000\x1b\\".into(),
            Query::KittyKeyboard => "\x1b[?0u".into(),
            // 2 = reset (supported); 0 = not recognised.
            Query::DecMode(m) => {
                let known = [1, 7, 12, 25, 47, 1000, 1002, 1003, 1004, 1006, 1047, 1049, 2004, 2026];
                format!("\x1b[?{m};{}$y", if known.contains(m) { 2 } else { 0 })
            }
            Query::AnsiMode(m) => format!("\x1b[{m};0$y"),
            Query::XtVersion => "\x1bP>|pty_bench(1)\x1b\\".into(),
            Query::WindowReport(14) => format!("\x1b[4;{};{}t", size.0 * 20, size.1 * 10),
            Query::WindowReport(16) => "\x1b[6;20;10t".into(),
            Query::WindowReport(_) => format!("\x1b[8;{};{}t", size.0, size.1),
            Query::ColorScheme => "\x1b[?997;1n".into(),
            Query::DynamicColor { which, bel } => {
                let rgb = if *which == 11 { "0000/0000/0000" } else { "ffff/ffff/ffff" };
                format!("\x1b]{which};rgb:{rgb}{}", st(*bel))
            }
            Query::PaletteColor { index, bel } => format!("\x1b]4;{index};rgb:8080/8080/8080{}", st(*bel)),
            Query::Termcap => "\x1bP0+r\x1b\\".into(),
        };
        s.into_bytes()
    }
}

/// Collects the queries a `vte` parser sees; everything else is ignored (vt100 draws).
#[derive(Default)]
struct QueryCollector {
    found: Vec<Query>,
    in_tcap: bool,
}

fn first_param(params: &vte::Params) -> Option<u16> {
    params.iter().next().and_then(|p| p.first().copied())
}

impl vte::Perform for QueryCollector {
    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], _ignore: bool, action: char) {
        let p = first_param(params).unwrap_or(0);
        let q = match (intermediates, action) {
            ([], 'n') if p == 6 => Query::CursorPosition,
            ([], 'n') if p == 5 => Query::DeviceStatus,
            ([b'?'], 'n') if p == 996 => Query::ColorScheme,
            ([b'?'], 'n') if p == 6 => Query::CursorPosition,
            ([], 'c') if p == 0 => Query::PrimaryDa,
            ([b'>'], 'c') => Query::SecondaryDa,
            ([b'='], 'c') => Query::TertiaryDa,
            ([b'?'], 'u') => Query::KittyKeyboard,
            ([b'?', b'$'], 'p') => Query::DecMode(p),
            ([b'$'], 'p') => Query::AnsiMode(p),
            ([b'>'], 'q') => Query::XtVersion,
            ([], 't') if matches!(p, 14 | 16 | 18) => Query::WindowReport(p),
            _ => return,
        };
        self.found.push(q);
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], bel: bool) {
        let num = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<u16>().ok());
        match params {
            [which, q] if *q == b"?" => {
                if let Some(which @ 10..=19) = num(which) {
                    self.found.push(Query::DynamicColor { which, bel });
                }
            }
            [four, index, q] if *four == b"4" && *q == b"?" => {
                if let Some(index) = num(index) {
                    self.found.push(Query::PaletteColor { index, bel });
                }
            }
            _ => {}
        }
    }

    fn hook(&mut self, _params: &vte::Params, intermediates: &[u8], _ignore: bool, action: char) {
        self.in_tcap = intermediates == b"+" && action == 'q';
    }

    fn unhook(&mut self) {
        if std::mem::take(&mut self.in_tcap) {
            self.found.push(Query::Termcap);
        }
    }
}

/// The emulated terminal: a vt100 screen plus a query scanner that answers in order, with the
/// cursor position as it is at the query.
struct Terminal {
    screen: vt100::Parser,
    scanner: vte::Parser,
    collector: QueryCollector,
    size: (u16, u16),
    answered: BTreeSet<String>,
}

impl Terminal {
    fn new(rows: u16, cols: u16) -> Terminal {
        let nz = |n: u16| NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN);
        Terminal {
            screen: vt100::Parser::new(nz(rows), nz(cols), 0),
            scanner: vte::Parser::new(),
            collector: QueryCollector::default(),
            size: (rows, cols),
            answered: BTreeSet::new(),
        }
    }

    /// Feeds program output; returns the bytes to send back.
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut reply = Vec::new();
        let mut drawn = 0;
        for i in 0..chunk.len() {
            self.scanner.advance(&mut self.collector, &chunk[i..=i]);
            if self.collector.found.is_empty() {
                continue;
            }
            self.screen.process(&chunk[drawn..=i]);
            drawn = i + 1;
            let cursor = self.screen.screen().cursor_position();
            for q in self.collector.found.drain(..) {
                reply.extend(q.answer(cursor, self.size));
                self.answered.insert(q.label());
            }
        }
        self.screen.process(&chunk[drawn..]);
        reply
    }

    fn visible_chars(&self) -> usize {
        self.screen.screen().contents().chars().filter(|c| !c.is_whitespace()).count()
    }

    /// The first (or last) few non-blank lines of the screen, for the report.
    fn excerpt(&self, from_end: bool) -> String {
        let text = self.screen.screen().contents();
        let mut lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if from_end {
            lines.reverse();
        }
        lines.truncate(3);
        if from_end {
            lines.reverse();
        }
        let mut s = lines.join(" / ").replace('`', "'");
        if s.chars().count() > 160 {
            s = s.chars().take(157).collect::<String>() + "...";
        }
        s
    }
}

fn self_check() -> Result<(), String> {
    let mut t = Terminal::new(40, 120);
    let cases: &[(&[u8], &[u8])] = &[
        (b"abc\x1b[6n", b"\x1b[1;4R"),
        (b"\x1b[c", b"\x1b[?62;22c"),
        (b"\x1b[>c", b"\x1b[>1;10;0c"),
        (b"\x1b]10;?\x1b\\", b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"),
        (b"\x1b]11;?\x07", b"\x1b]11;rgb:0000/0000/0000\x07"),
        (b"\x1b[?u\x1b[c", b"\x1b[?0u\x1b[?62;22c"),
        (b"\x1b[?2026$p", b"\x1b[?2026;2$y"),
        (b"\x1b[2;5H\x1b[6n", b"\x1b[2;5R"),
        (b"\x1b[18t", b"\x1b[8;40;120t"),
        (b"\x1bP+q544e\x1b\\", b"\x1bP0+r\x1b\\"),
        (b"\x1b[1mplain text\x1b[0m", b""),
    ];
    for (input, want) in cases {
        let got = t.feed(input);
        if got != *want {
            return Err(format!("{:?} answered {:?}, want {:?}", esc(input), esc(&got), esc(want)));
        }
    }
    // A query split across reads is still answered, once.
    let (a, b) = (t.feed(b"\x1b["), t.feed(b"6n"));
    if !a.is_empty() || b != b"\x1b[2;15R" {
        return Err(format!("split CPR answered {:?} then {:?}", esc(&a), esc(&b)));
    }
    // The pieces the report rests on.
    let me = read_stat(std::process::id() as i32).ok_or("cannot parse /proc/self/stat")?;
    if me.ppid <= 0 || me.comm.is_empty() {
        return Err(format!("/proc/self/stat parsed as ppid {} comm {:?}", me.ppid, me.comm));
    }
    let m = stats(&[4.0, 1.0, 3.0, 2.0]).map(|s| (s.min, s.median, s.max));
    if m != Some((1.0, 2.5, 4.0)) {
        return Err(format!("stats of 1..4 gave {m:?}"));
    }
    let date = utc_string(UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_660));
    if date != "2000-02-29 01:01 UTC" {
        return Err(format!("utc_string gave {date}"));
    }
    server::self_check().map_err(|e| format!("scripted server: {e}"))?;
    let sorted = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    let p = (percentile(&sorted, 50.0), percentile(&sorted, 99.0), percentile(&sorted[..1], 99.0));
    if p != (5.0, 10.0, 1.0) {
        return Err(format!("percentiles of 1..10 gave {p:?}"));
    }
    let spec = parse_program("bash=/bin/bash --norc -i")?;
    if spec.name != "bash" || spec.argv != ["/bin/bash", "--norc", "-i"] {
        return Err(format!("parse_program gave {spec:?}"));
    }
    Ok(())
}

fn esc(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace('\x1b', "ESC").replace('\x07', "BEL")
}

// ---------------------------------------------------------------------------------------------
// The process tree in /proc

struct ProcStat {
    pid: i32,
    comm: String,
    ppid: i32,
    session: i32,
    /// utime + stime + cutime + cstime, in clock ticks.
    cpu_ticks: u64,
}

fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything; fields resume after the last ')'.
    let close = text.rfind(')')?;
    let comm = text[text.find('(')? + 1..close].to_string();
    let rest = &text[close + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<i64>().ok());
    let ticks = (14..=17).map(num).try_fold(0u64, |acc, v| v.map(|v| acc + v.max(0) as u64))?;
    Some(ProcStat { pid, comm, ppid: num(4)? as i32, session: num(6)? as i32, cpu_ticks: ticks })
}

fn all_procs() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter_map(read_stat).collect()
}

/// Environment variable set to a per-run value in every measured program; daemons inherit it.
const MARKER_ENV: &str = "PTY_BENCH_RUN";

/// Which processes belong to one run.
struct Tracked {
    root: i32,
    /// `PTY_BENCH_RUN=<value>` as it appears in /proc/<pid>/environ.
    marker: Vec<u8>,
}

fn has_marker(pid: i32, marker: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == marker))
}

/// The root, its descendants, anything left in its session, and processes that carry the run's
/// marker: Codex, for one, starts an app-server daemon in its own session under init.
fn tree(t: &Tracked) -> Vec<ProcStat> {
    let procs = all_procs();
    let mut members: HashSet<i32> = procs
        .iter()
        .filter(|p| p.pid == t.root || p.session == t.root || has_marker(p.pid, &t.marker))
        .map(|p| p.pid)
        .collect();
    loop {
        let before = members.len();
        for p in &procs {
            if members.contains(&p.ppid) {
                members.insert(p.pid);
            }
        }
        if members.len() == before {
            break;
        }
    }
    procs.into_iter().filter(|p| members.contains(&p.pid)).collect()
}

fn rss_kib(pid: i32) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return 0 };
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct TreeSample {
    rss_kib: u64,
    cpu_ticks: u64,
    procs: usize,
    /// `name RSS` of each member, largest first.
    members: String,
}

fn sample_tree(tracked: &Tracked) -> TreeSample {
    let t = tree(tracked);
    let mut rss: Vec<(u64, &str)> = t.iter().map(|p| (rss_kib(p.pid), p.comm.as_str())).collect();
    rss.sort_by_key(|r| std::cmp::Reverse(r.0));
    TreeSample {
        rss_kib: rss.iter().map(|r| r.0).sum(),
        cpu_ticks: t.iter().map(|p| p.cpu_ticks).sum(),
        procs: t.len(),
        members: rss
            .iter()
            .map(|(kib, name)| format!("{name} {:.1} MiB", *kib as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn kill_tree(tracked: &Tracked) {
    for _ in 0..3 {
        let members = tree(tracked);
        if members.is_empty() {
            return;
        }
        for p in &members {
            // SAFETY: plain kill(2) on pids we found in the program's tree.
            unsafe { libc::kill(p.pid, libc::SIGKILL) };
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// One run

struct RunResult {
    first_frame_ms: f64,
    /// The tree sampled `--rss-delay-secs` after the first frame; None if the program had exited.
    start: Option<StartFigures>,
    /// None if the program exited before the idle window ended.
    idle: Option<IdleFigures>,
    /// The program closed the terminal on its own: (ms after the first frame, its last screen).
    exited: Option<(f64, String)>,
    excerpt: String,
    answered: BTreeSet<String>,
    /// With `--keystrokes`: what typing during a streamed answer gave.
    keys: Option<KeyFigures>,
    /// With `--keystrokes`: how the program was pointed at the server.
    driven: Option<String>,
    /// With `--keystrokes`: the requests the server saw during the run.
    requests: Vec<String>,
}

impl RunResult {
    /// A run that reached its first frame; the figures of each mode are filled in after.
    fn framed(first_frame_ms: f64, excerpt: String) -> RunResult {
        RunResult {
            first_frame_ms,
            start: None,
            idle: None,
            exited: None,
            excerpt,
            answered: BTreeSet::new(),
            keys: None,
            driven: None,
            requests: Vec::new(),
        }
    }
}

struct KeyFigures {
    /// Write → first output chunk after which the screen shows the key, per echoed key (ms).
    latencies: Vec<f64>,
    sent: usize,
    /// Keys written while the server was still streaming the answer.
    while_streaming: usize,
    /// Enter → the answer's opening words on screen (ms); None if they never showed.
    answer_on_screen_ms: Option<f64>,
    rss_mib: f64,
    members: String,
}

struct StartFigures {
    rss_mib: f64,
    cpu_ms: f64,
    procs: f64,
    members: String,
}

struct IdleFigures {
    cpu_ms: f64,
    bytes: f64,
}

enum ReaderEvent {
    FirstFrame {
        at: Instant,
        excerpt: String,
    },
    /// The program closed the terminal (exited); carries the screen for the report.
    Closed {
        at: Instant,
        excerpt: String,
    },
    /// With `--keystrokes`, after the first frame: the screen after each output chunk.
    Screen {
        at: Instant,
        contents: String,
    },
}

struct Scratch {
    dir: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    talaria_home: PathBuf,
}

fn scratch(spec: &ProgramSpec, opts: &Options) -> Result<Scratch, String> {
    let parent = &opts.scratch_dir;
    let dir = tempfile::Builder::new()
        .prefix("pty-bench-")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a temp dir in {}: {e}", parent.display()))?;
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    let talaria_home = dir.path().join("talaria-home");
    for d in [&home, &work, &talaria_home] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    for (rel, content) in opts.home_files.get(&spec.name).into_iter().flatten() {
        let path = home.join(rel);
        let written = match path.parent() {
            Some(parent) => std::fs::create_dir_all(parent).and_then(|_| std::fs::write(&path, content)),
            None => std::fs::write(&path, content),
        };
        written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(Scratch { dir, home, work, talaria_home })
}

fn command(spec: &ProgramSpec, s: &Scratch, marker: &str) -> CommandBuilder {
    let mut cmd = CommandBuilder::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..]);
    cmd.cwd(&s.work);
    cmd.env_clear();
    for key in ENV_ALLOW {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.env("HOME", &s.home);
    cmd.env("XDG_CONFIG_HOME", s.home.join(".config"));
    cmd.env("XDG_DATA_HOME", s.home.join(".local/share"));
    cmd.env("XDG_STATE_HOME", s.home.join(".local/state"));
    cmd.env("XDG_CACHE_HOME", s.home.join(".cache"));
    cmd.env("TALARIA_HOME", &s.talaria_home);
    cmd.env(MARKER_ENV, marker);
    cmd.env("TERM", "xterm-256color");
    cmd.env("COLORTERM", "truecolor");
    cmd
}

/// What the reader thread hands back once the terminal closes.
#[derive(Default)]
struct ReaderEnd {
    answered: BTreeSet<String>,
    /// Raw output, kept only with `--save-output` (capped).
    raw: Vec<u8>,
    screen: String,
}

const SAVE_CAP: usize = 16 << 20;

/// One run in `shared` (with `--reuse-home`) or in fresh directories; `run` 0 is a warm-up.
fn run_once(
    spec: &ProgramSpec,
    opts: &Options,
    run: usize,
    shared: Option<&Scratch>,
    srv: Option<&server::Server>,
) -> Result<RunResult, String> {
    let fresh;
    let scratch = match shared {
        Some(s) => s,
        None => {
            fresh = scratch(spec, opts)?;
            &fresh
        }
    };
    let marker = format!("{}#{run}", scratch.dir.path().display());
    let size = PtySize { rows: opts.rows, cols: opts.cols, pixel_width: opts.cols * 10, pixel_height: opts.rows * 20 };
    let pair = native_pty_system().openpty(size).map_err(|e| format!("openpty: {e}"))?;
    let mut reader = pair.master.try_clone_reader().map_err(|e| format!("pty reader: {e}"))?;
    let writer = Arc::new(std::sync::Mutex::new(pair.master.take_writer().map_err(|e| format!("pty writer: {e}"))?));

    let mut cmd = command(spec, scratch, &marker);
    let mut driven = None;
    if let Some(srv) = srv {
        let driver = Driver::of(spec, opts).ok_or_else(|| {
            format!(
                "no way to point {} at the scripted server: pass --driver {}=talaria|talaria-anthropic|codex|claude",
                spec.name, spec.name
            )
        })?;
        driven = Some(drive(driver, scratch, &srv.base(), &mut cmd)?);
        // A stream the previous run left behind must not count for this one.
        let deadline = Instant::now() + Duration::from_secs(3);
        while srv.streams_active.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
    }
    let log_from = srv.map_or(0, |s| s.log_len());
    let spawned = Instant::now();
    let mut child = pair.slave.spawn_command(cmd).map_err(|e| format!("cannot start {}: {e}", spec.argv[0]))?;
    drop(pair.slave);
    let root = child.process_id().map(|p| p as i32).ok_or("the child has no pid")?;

    let bytes = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let (end_tx, end_rx) = mpsc::channel();
    let reader_thread = {
        let bytes = bytes.clone();
        let writer = writer.clone();
        let watch = srv.is_some();
        let (rows, cols, min_chars, keep) = (opts.rows, opts.cols, opts.min_chars, opts.save_output.is_some());
        thread::spawn(move || {
            let mut term = Terminal::new(rows, cols);
            let mut buf = vec![0u8; 64 * 1024];
            let mut raw = Vec::new();
            let mut framed = false;
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let at = Instant::now();
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                if keep && raw.len() < SAVE_CAP {
                    raw.extend_from_slice(&buf[..n.min(SAVE_CAP - raw.len())]);
                }
                let reply = term.feed(&buf[..n]);
                if !reply.is_empty() {
                    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
                    if w.write_all(&reply).and_then(|_| w.flush()).is_err() {
                        break;
                    }
                }
                if !framed && term.visible_chars() >= min_chars {
                    framed = true;
                    let _ = tx.send(ReaderEvent::FirstFrame { at, excerpt: term.excerpt(false) });
                } else if framed && watch {
                    let _ = tx.send(ReaderEvent::Screen { at, contents: term.screen.screen().contents() });
                }
            }
            let _ = tx.send(ReaderEvent::Closed { at: Instant::now(), excerpt: term.excerpt(true) });
            let screen = term.screen.screen().contents();
            let _ = end_tx.send(ReaderEnd { answered: term.answered, raw, screen });
        })
    };

    let tracked = Tracked { root, marker: format!("{MARKER_ENV}={marker}").into_bytes() };
    let outcome = match srv {
        Some(srv) => measure_keys(&tracked, spawned, &rx, &writer, srv, log_from, opts),
        None => measure(&tracked, spawned, &rx, &bytes, opts),
    };
    kill_tree(&tracked);
    let _ = child.kill();
    let _ = child.wait();
    drop(pair.master);
    // The reader ends once every holder of the PTY is gone; do not hang on a straggler.
    let end = end_rx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
    if reader_thread.is_finished() {
        let _ = reader_thread.join();
    }
    if let Some(dir) = &opts.save_output {
        let base = dir.join(format!("{}-{}", spec.name, run));
        let saved = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::write(base.with_extension("out"), &end.raw))
            .and_then(|_| std::fs::write(base.with_extension("screen"), &end.screen));
        if let Err(e) = saved {
            eprintln!("cannot save output under {}: {e}", dir.display());
        }
    }
    let requests: Vec<String> =
        srv.map(|s| s.log_since(log_from)).unwrap_or_default().into_iter().map(|l| l.line).collect();
    outcome.map(|mut r| {
        r.driven = driven;
        r.requests = requests;
        r.answered = end.answered;
        r
    })
}

fn measure(
    tracked: &Tracked,
    spawned: Instant,
    rx: &mpsc::Receiver<ReaderEvent>,
    bytes: &AtomicU64,
    opts: &Options,
) -> Result<RunResult, String> {
    let (frame_at, excerpt) = match rx.recv_timeout(opts.timeout) {
        Ok(ReaderEvent::FirstFrame { at, excerpt }) => (at, excerpt),
        Ok(ReaderEvent::Closed { excerpt, .. }) => {
            return Err(format!("exited before a first frame; screen: {excerpt:?}"));
        }
        Ok(ReaderEvent::Screen { .. }) | Err(_) => {
            return Err(format!(
                "no first frame within {} s ({} bytes written)",
                opts.timeout.as_secs_f64(),
                bytes.load(Ordering::Relaxed)
            ));
        }
    };
    let mut result = RunResult::framed(ms(frame_at - spawned), excerpt);
    // A program that exits after its first frame (a peer that cannot reach its servers) still
    // has a first-frame time; what comes after is left out and the report says why.
    let exited = |result: &mut RunResult| match rx.try_recv() {
        Ok(ReaderEvent::Closed { at, excerpt }) => {
            result.exited = Some((ms(at.saturating_duration_since(frame_at)), excerpt));
            true
        }
        _ => false,
    };
    let tick_ms = 1000.0 / ticks_per_sec();
    sleep_until(frame_at + opts.rss_delay);
    let start = sample_tree(tracked);
    let bytes_start = bytes.load(Ordering::Relaxed);
    if exited(&mut result) {
        return Ok(result);
    }
    result.start = Some(StartFigures {
        rss_mib: start.rss_kib as f64 / 1024.0,
        cpu_ms: start.cpu_ticks as f64 * tick_ms,
        procs: start.procs as f64,
        members: start.members.clone(),
    });
    sleep_until(Instant::now() + opts.idle);
    let end = sample_tree(tracked);
    let bytes_end = bytes.load(Ordering::Relaxed);
    if exited(&mut result) {
        return Ok(result);
    }
    result.idle = Some(IdleFigures {
        cpu_ms: end.cpu_ticks.saturating_sub(start.cpu_ticks) as f64 * tick_ms,
        bytes: bytes_end.saturating_sub(bytes_start) as f64,
    });
    Ok(result)
}

/// The character typed in `--keystrokes` runs: on no program's screen otherwise.
const KEY: char = '\u{2ac}';
/// What is typed before Enter, and the words that show it arrived.
const PROMPT: &str = "Write a very long story about a keeper";
const PROMPT_SEEN: &str = "long story about";

/// What the main thread knows of the screen while it drives a run.
struct ScreenWatch<'a> {
    rx: &'a mpsc::Receiver<ReaderEvent>,
    last: String,
}

impl ScreenWatch<'_> {
    /// Waits until `pred` holds for the screen after some output chunk; returns that chunk's
    /// read time, or None at the deadline. Err if the program exits.
    fn until(&mut self, deadline: Instant, pred: impl Fn(&str) -> bool) -> Result<Option<Instant>, String> {
        if pred(&self.last) {
            return Ok(Some(Instant::now()));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(ReaderEvent::Screen { at, contents }) => {
                    let hit = pred(&contents);
                    self.last = contents;
                    if hit {
                        return Ok(Some(at));
                    }
                }
                Ok(ReaderEvent::Closed { excerpt, .. }) => return Err(format!("exited; its last screen: {excerpt:?}")),
                Ok(ReaderEvent::FirstFrame { .. }) => {}
                Err(_) => return Ok(None),
            }
        }
    }

    /// Waits until no output came for `quiet`, at most until `deadline`.
    fn settle(&mut self, quiet: Duration, deadline: Instant) -> Result<(), String> {
        while Instant::now() < deadline {
            match self.rx.recv_timeout(quiet) {
                Ok(ReaderEvent::Screen { contents, .. }) => self.last = contents,
                Ok(ReaderEvent::Closed { excerpt, .. }) => return Err(format!("exited; its last screen: {excerpt:?}")),
                Ok(ReaderEvent::FirstFrame { .. }) => {}
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    fn excerpt(&self) -> String {
        let lines: Vec<&str> = self.last.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let s = lines[lines.len().saturating_sub(6)..].join(" / ");
        s.chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect()
    }
}

fn send(writer: &std::sync::Mutex<Box<dyn Write + Send>>, bytes: &[u8]) -> Result<(), String> {
    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
    w.write_all(bytes).and_then(|_| w.flush()).map_err(|e| format!("cannot write to the terminal: {e}"))
}

/// `--keystrokes`: first frame, prompt + Enter, the answer streaming on screen, then N keys, each
/// timed from its write to the first output chunk after which the screen shows it.
fn measure_keys(
    tracked: &Tracked,
    spawned: Instant,
    rx: &mpsc::Receiver<ReaderEvent>,
    writer: &std::sync::Mutex<Box<dyn Write + Send>>,
    srv: &server::Server,
    log_from: usize,
    opts: &Options,
) -> Result<RunResult, String> {
    let (frame_at, excerpt) = match rx.recv_timeout(opts.timeout) {
        Ok(ReaderEvent::FirstFrame { at, excerpt }) => (at, excerpt),
        Ok(ReaderEvent::Closed { excerpt, .. }) => {
            return Err(format!("exited before a first frame; screen: {excerpt:?}"))
        }
        Ok(ReaderEvent::Screen { .. }) | Err(_) => {
            return Err(format!("no first frame within {} s", opts.timeout.as_secs_f64()));
        }
    };
    let mut w = ScreenWatch { rx, last: String::new() };
    // Start-up screens draw in several steps; type once the screen has been still for a while.
    w.settle(Duration::from_millis(1000), Instant::now() + Duration::from_secs(20))?;
    send(writer, PROMPT.as_bytes())?;
    if w.until(Instant::now() + Duration::from_secs(10), |s| s.contains(PROMPT_SEEN))?.is_none() {
        return Err(format!("the typed prompt never showed on screen; screen: {:?}", w.excerpt()));
    }
    // Not at once: some programs take Enter right after a burst of characters for a pasted newline.
    w.settle(Duration::from_millis(400), Instant::now() + Duration::from_secs(3))?;
    let before = srv.streams_started.load(Ordering::Relaxed);
    let mut entered = Instant::now();
    let mut asked = false;
    for attempt in 0..3 {
        if attempt > 0 {
            eprintln!("  no model request {} s after Enter; pressing Enter again", 10 * attempt);
        }
        entered = Instant::now();
        send(writer, b"\r")?;
        let deadline = entered + Duration::from_secs(10);
        while Instant::now() < deadline {
            if srv.streams_started.load(Ordering::Relaxed) > before {
                asked = true;
                break;
            }
            w.settle(Duration::from_millis(10), Instant::now() + Duration::from_millis(10))?;
        }
        if asked {
            break;
        }
    }
    if !asked {
        let seen: Vec<String> = srv.log_since(log_from).into_iter().map(|l| l.line).collect();
        return Err(format!(
            "no streamed model request after the prompt and Enter (three tries); screen: {:?}; requests of this run: {seen:?}",
            w.excerpt()
        ));
    }
    let answer_at = w.until(Instant::now() + Duration::from_secs(15), |s| s.contains(server::ANSWER_OPENING))?;
    let answer_on_screen_ms = answer_at.map(|at| ms(at.saturating_duration_since(entered)));
    let mut key_buf = [0u8; 4];
    let key = KEY.encode_utf8(&mut key_buf).as_bytes().to_vec();
    let count = |s: &str| s.chars().filter(|&c| c == KEY).count();
    let base = count(&w.last);
    let mut latencies = Vec::new();
    let mut while_streaming = 0;
    for k in 1..=opts.keystrokes {
        w.settle(opts.key_interval, Instant::now() + opts.key_interval)?;
        if srv.streams_active.load(Ordering::Relaxed) > 0 {
            while_streaming += 1;
        }
        let t0 = Instant::now();
        send(writer, &key)?;
        if let Some(at) = w.until(t0 + opts.key_timeout, |s| count(s) >= base + k)? {
            latencies.push(ms(at.saturating_duration_since(t0)));
        }
    }
    let sample = sample_tree(tracked);
    if latencies.is_empty() {
        return Err(format!("none of {} keys showed on screen; screen: {:?}", opts.keystrokes, w.excerpt()));
    }
    Ok(RunResult {
        keys: Some(KeyFigures {
            latencies,
            sent: opts.keystrokes,
            while_streaming,
            answer_on_screen_ms,
            rss_mib: sample.rss_kib as f64 / 1024.0,
            members: sample.members,
        }),
        ..RunResult::framed(ms(frame_at - spawned), excerpt)
    })
}

fn key_percentile(r: &RunResult, p: f64) -> Option<f64> {
    let mut v = r.keys.as_ref()?.latencies.clone();
    v.sort_by(f64::total_cmp);
    Some(percentile(&v, p))
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        thread::sleep(deadline - now);
    }
}

// ---------------------------------------------------------------------------------------------
// Running everything and the report

struct Figure {
    label: String,
    value: fn(&RunResult) -> Option<f64>,
    decimals: usize,
}

fn figures(opts: &Options) -> Vec<Figure> {
    if opts.keystrokes > 0 {
        return vec![
            Figure { label: "time to first frame (ms)".into(), value: |r| Some(r.first_frame_ms), decimals: 1 },
            Figure {
                label: "Enter to the answer on screen (ms)".into(),
                value: |r| r.keys.as_ref()?.answer_on_screen_ms,
                decimals: 0,
            },
            Figure { label: "keystroke p50 of the run (ms)".into(), value: |r| key_percentile(r, 50.0), decimals: 2 },
            Figure { label: "keystroke p99 of the run (ms)".into(), value: |r| key_percentile(r, 99.0), decimals: 2 },
            Figure {
                label: "keys echoed".into(),
                value: |r| r.keys.as_ref().map(|k| k.latencies.len() as f64),
                decimals: 0,
            },
            Figure {
                label: "keys sent while the answer streamed".into(),
                value: |r| r.keys.as_ref().map(|k| k.while_streaming as f64),
                decimals: 0,
            },
            Figure {
                label: "RSS after the keys, answer streaming (MiB)".into(),
                value: |r| r.keys.as_ref().map(|k| k.rss_mib),
                decimals: 1,
            },
        ];
    }
    let idle = fmt_secs(opts.idle);
    let delay = fmt_secs(opts.rss_delay);
    vec![
        Figure { label: "time to first frame (ms)".into(), value: |r| Some(r.first_frame_ms), decimals: 1 },
        Figure {
            label: format!("RSS {delay} s after first frame (MiB)"),
            value: |r| r.start.as_ref().map(|s| s.rss_mib),
            decimals: 1,
        },
        Figure {
            label: format!("CPU time, idle {idle} s (ms)"),
            value: |r| r.idle.as_ref().map(|i| i.cpu_ms),
            decimals: 0,
        },
        Figure {
            label: format!("bytes written, idle {idle} s"),
            value: |r| r.idle.as_ref().map(|i| i.bytes),
            decimals: 0,
        },
        Figure {
            label: format!("CPU time, spawn to first frame + {delay} s (ms)"),
            value: |r| r.start.as_ref().map(|s| s.cpu_ms),
            decimals: 0,
        },
        Figure { label: "processes in the tree".into(), value: |r| r.start.as_ref().map(|s| s.procs), decimals: 0 },
    ]
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

#[derive(Default)]
struct ProgramResults {
    runs: Vec<RunResult>,
    failures: Vec<String>,
}

struct Stats {
    min: f64,
    median: f64,
    max: f64,
}

fn stats(values: &[f64]) -> Option<Stats> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return None;
    }
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Stats { min: v[0], median, max: v[n - 1] })
}

fn progress_line(r: &RunResult, figs: &[Figure]) -> String {
    let mut parts: Vec<String> =
        figs.iter().filter_map(|f| (f.value)(r).map(|v| format!("{} {:.*}", f.label, f.decimals, v))).collect();
    if let Some((after, screen)) = &r.exited {
        parts.push(format!("exited on its own {after:.0} ms after the first frame, showing {screen:?}"));
    }
    if let Some(k) = &r.keys {
        let mut v = k.latencies.clone();
        v.sort_by(f64::total_cmp);
        parts.push(format!("keys min {:.2} max {:.2} ms", v[0], v[v.len() - 1]));
    }
    parts.join("; ")
}

fn values(runs: &[RunResult], f: &Figure) -> Vec<f64> {
    runs.iter().filter_map(f.value).collect()
}

fn run(opts: &Options, args: &[String]) -> Result<(), String> {
    let mut results: Vec<ProgramResults> = opts.programs.iter().map(|_| ProgramResults::default()).collect();
    let started = SystemTime::now();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let figs = figures(opts);
    let srv = match opts.keystrokes {
        0 => None,
        _ => {
            let interval = opts.stream_interval.as_secs_f64();
            let config = server::StreamConfig {
                pieces: ((opts.stream_secs / interval).ceil() as usize).max(1),
                words_per_piece: opts.words_per_piece,
                interval: opts.stream_interval,
            };
            let srv = server::Server::start(config).map_err(|e| format!("cannot start the scripted server: {e}"))?;
            eprintln!("scripted model server on {}", srv.base());
            Some(srv)
        }
    };
    let srv = srv.as_ref();
    let mut homes = Vec::new();
    if opts.reuse_home {
        for spec in &opts.programs {
            let home = scratch(spec, opts)?;
            match run_once(spec, opts, 0, Some(&home), srv) {
                Ok(r) => eprintln!("{} warm-up run: {}", spec.name, progress_line(&r, &figs)),
                Err(e) => eprintln!("{} warm-up run: FAILED: {e}", spec.name),
            }
            homes.push(home);
        }
    }
    for i in 0..opts.runs {
        for (p, (spec, res)) in opts.programs.iter().zip(results.iter_mut()).enumerate() {
            match run_once(spec, opts, i + 1, homes.get(p), srv) {
                Ok(r) => {
                    eprintln!("{} run {}/{}: {}", spec.name, i + 1, opts.runs, progress_line(&r, &figs));
                    res.runs.push(r);
                }
                Err(e) => {
                    eprintln!("{} run {}/{}: FAILED: {e}", spec.name, i + 1, opts.runs);
                    res.failures.push(e);
                }
            }
        }
    }
    let report = report(opts, args, &results, started, load.trim());
    print!("{report}");
    if let Some(path) = &opts.out {
        std::fs::write(path, &report).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("report written to {}", path.display());
    }
    if results.iter().all(|r| r.runs.is_empty()) {
        return Err("no program produced a single successful run".into());
    }
    Ok(())
}

fn report(opts: &Options, args: &[String], results: &[ProgramResults], started: SystemTime, load: &str) -> String {
    let mut out = String::new();
    let figs = figures(opts);
    let _ = writeln!(out, "# Talaria PTY benchmark\n");
    let _ = writeln!(out, "- date: {}", utc_string(started));
    let _ = writeln!(out, "- machine: {}", machine_info());
    let _ = writeln!(out, "- load average at start: {load}");
    let shown: Vec<String> = args.iter().filter(|a| *a != "--bench").map(|a| shell_quote(a)).collect();
    let _ = writeln!(out, "- command: `cargo bench --bench pty_bench -- {}`", shown.join(" "));
    if let Ok(outer) = std::env::var("PTY_BENCH_INVOKED_AS") {
        let _ = writeln!(out, "- run by: `{outer}`");
    }
    let _ = writeln!(
        out,
        "- settings: {}x{} PTY, {} runs per program (round-robin), first frame = first output chunk after \
         which the screen shows >= {} non-blank characters; HOME, XDG dirs, TALARIA_HOME and cwd \
         {}; environment reduced to {} plus TERM=xterm-256color, COLORTERM=truecolor ({})",
        opts.cols,
        opts.rows,
        opts.runs,
        opts.min_chars,
        if opts.reuse_home { "per program, kept across its runs after one unmeasured warm-up run" } else { "per run" },
        ENV_ALLOW.join(", "),
        if opts.keystrokes > 0 {
            "no real API keys; what each driver adds is listed under its program"
        } else {
            "no API keys"
        }
    );
    if opts.keystrokes > 0 {
        let _ = writeln!(
            out,
            "- keystrokes: after the first frame and 1 s without output, the driver types `{PROMPT}`, waits \
             0.4 s without output, presses Enter, waits for the scripted server to start streaming and \
             for the answer's opening words (`{}`) on screen, then types '{KEY}' (U+{:04X}) {} times, each \
             {} ms after the previous one's echo; a key's latency runs from its write to the PTY to the \
             read of the first output chunk after which the screen shows that many '{KEY}' (at most {} \
             ms, else it counts as not echoed); the process tree's RSS is sampled after the last key",
            server::ANSWER_OPENING,
            KEY as u32,
            opts.keystrokes,
            opts.key_interval.as_millis(),
            opts.key_timeout.as_millis()
        );
        let _ = writeln!(
            out,
            "- scripted server: HTTP/1.1 on 127.0.0.1, the same answer to every program in its wire format \
             (OpenAI chat completions, OpenAI Responses, Anthropic Messages; all SSE), {} words every {} ms \
             for {} s; it is also every program's HTTP(S)_PROXY (NO_PROXY=127.0.0.1,localhost) and refuses \
             anything bound elsewhere, so nothing leaves the machine",
            opts.words_per_piece,
            opts.stream_interval.as_millis(),
            opts.stream_secs
        );
    } else {
        let _ = writeln!(
            out,
            "- figures cover the whole process tree: descendants, the program's session, and daemons that \
             carry the run's {MARKER_ENV} variable; the idle window starts at the RSS sample, {} s after the \
             first frame, with no input; CPU time is counted in clock ticks of {:.0} ms",
            fmt_secs(opts.rss_delay),
            1000.0 / ticks_per_sec()
        );
    }

    for (spec, res) in opts.programs.iter().zip(results) {
        let _ = writeln!(out, "\n## {}\n", spec.name);
        let _ = writeln!(out, "- command: `{}`", spec.argv.join(" "));
        for (path, content) in opts.home_files.get(&spec.name).into_iter().flatten() {
            let _ = writeln!(out, "- HOME/{} written before each start: `{content}`", path.display());
        }
        for note in opts.notes.get(&spec.name).into_iter().flatten() {
            let _ = writeln!(out, "- {note}");
        }
        let _ = writeln!(out, "- successful runs: {} of {}", res.runs.len(), res.runs.len() + res.failures.len());
        let mut failures: Vec<&String> = res.failures.iter().collect();
        failures.dedup();
        for f in failures {
            let _ = writeln!(out, "- failure: {}", f.replace('`', "'"));
        }
        let Some(first) = res.runs.first() else {
            if opts.keystrokes > 0 {
                let _ =
                    writeln!(out, "- **not measured: no run got as far as the keystrokes (see the failures above)**");
            }
            continue;
        };
        let _ = writeln!(out, "- first frame (run 1) shows: `{}`", first.excerpt);
        let answered: BTreeSet<&String> = res.runs.iter().flat_map(|r| &r.answered).collect();
        let answered: Vec<&str> = answered.into_iter().map(String::as_str).collect();
        let answered = if answered.is_empty() { "none".to_string() } else { answered.join(", ") };
        let _ = writeln!(out, "- terminal queries answered: {answered}");
        if let Some(start) = res.runs.iter().find_map(|r| r.start.as_ref()) {
            let _ = writeln!(out, "- process tree at the RSS sample (first such run): {}", start.members);
        }
        if let Some(driven) = res.runs.iter().find_map(|r| r.driven.as_ref()) {
            let _ = writeln!(out, "- pointed at the scripted server with {driven}");
        }
        if let Some(k) = res.runs.iter().find_map(|r| r.keys.as_ref()) {
            let _ = writeln!(out, "- process tree after the keys (first run): {}", k.members);
        }
        if opts.keystrokes > 0 {
            let mut seen: Vec<(String, usize)> = Vec::new();
            for line in res.runs.iter().flat_map(|r| &r.requests) {
                match seen.iter_mut().find(|(l, _)| l == line) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((line.clone(), 1)),
                }
            }
            let seen: Vec<String> = seen.iter().map(|(l, n)| format!("{l} ×{n}")).collect();
            let _ = writeln!(
                out,
                "- requests the server saw (all successful runs): {}",
                if seen.is_empty() { "none".into() } else { seen.join(", ") }
            );
            let mut all: Vec<f64> =
                res.runs.iter().filter_map(|r| r.keys.as_ref()).flat_map(|k| k.latencies.clone()).collect();
            all.sort_by(f64::total_cmp);
            let sent: usize = res.runs.iter().filter_map(|r| r.keys.as_ref()).map(|k| k.sent).sum();
            if let (Some(first), Some(last)) = (all.first(), all.last()) {
                let _ = writeln!(
                    out,
                    "- **keystroke to screen, all keys of all runs ({} of {sent} echoed): min {first:.2} / p50 {:.2} / \
                     p99 {:.2} / max {last:.2} ms**",
                    all.len(),
                    percentile(&all, 50.0),
                    percentile(&all, 99.0)
                );
            }
            if res.runs.iter().any(|r| r.keys.as_ref().is_some_and(|k| k.answer_on_screen_ms.is_none())) {
                let _ = writeln!(
                    out,
                    "- the answer's opening words never showed on screen within 15 s in some runs; their keys \
                     were still typed while the server streamed"
                );
            }
        }
        let exits: Vec<&(f64, String)> = res.runs.iter().filter_map(|r| r.exited.as_ref()).collect();
        if let Some((_, screen)) = exits.last() {
            let after = stats(&exits.iter().map(|e| e.0).collect::<Vec<_>>()).map_or(0.0, |s| s.median);
            let _ = writeln!(
                out,
                "- exited on its own after the first frame in {} of {} runs (median {after:.0} ms after it), \
                 so later figures lack those runs; its last screen: `{}`",
                exits.len(),
                res.runs.len(),
                screen.replace('`', "'")
            );
        }
        let _ = writeln!(out, "\n| figure | runs | min | median | max |\n| --- | ---: | ---: | ---: | ---: |");
        for f in &figs {
            let v = values(&res.runs, f);
            match stats(&v) {
                Some(s) => {
                    let d = f.decimals;
                    let _ = writeln!(
                        out,
                        "| {} | {} | {:.d$} | {:.d$} | {:.d$} |",
                        f.label,
                        v.len(),
                        s.min,
                        s.median,
                        s.max
                    );
                }
                None => {
                    let _ = writeln!(out, "| {} | 0 | — | — | — |", f.label);
                }
            }
        }
    }

    if let Some(table) = comparison(opts, results, &figs) {
        out.push_str(&table);
    }
    if opts.keystrokes > 0 {
        out.push_str(&key_table(opts, results));
    }
    out
}

/// Every program's keystroke latency over all its keys, side by side; a program without any
/// says why.
fn key_table(opts: &Options, results: &[ProgramResults]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Keystroke to screen while the answer streams (all keys of all runs)\n\n\
         | program | runs | keys echoed / sent | min (ms) | p50 (ms) | p99 (ms) | max (ms) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for (spec, res) in opts.programs.iter().zip(results) {
        let keys: Vec<&KeyFigures> = res.runs.iter().filter_map(|r| r.keys.as_ref()).collect();
        let mut all: Vec<f64> = keys.iter().flat_map(|k| k.latencies.iter().copied()).collect();
        all.sort_by(f64::total_cmp);
        let sent: usize = keys.iter().map(|k| k.sent).sum();
        let runs = format!("{} of {}", res.runs.len(), res.runs.len() + res.failures.len());
        match (all.first(), all.last()) {
            (Some(first), Some(last)) => {
                let _ = writeln!(
                    out,
                    "| {} | {runs} | {} / {sent} | {first:.2} | {:.2} | {:.2} | {last:.2} |",
                    spec.name,
                    all.len(),
                    percentile(&all, 50.0),
                    percentile(&all, 99.0)
                );
            }
            _ => {
                let why = res.failures.first().map_or("no run".to_string(), |f| f.replace('|', "/").replace('`', "'"));
                let why: String = why.chars().take(300).collect();
                let _ = writeln!(out, "| {} | {runs} | not measured: {why} | — | — | — | — |", spec.name);
            }
        }
    }
    out
}

/// Medians side by side with ratios other / baseline, when the baseline and another program both
/// have results.
fn comparison(opts: &Options, results: &[ProgramResults], figs: &[Figure]) -> Option<String> {
    let base = opts.programs.iter().position(|p| p.name == opts.baseline)?;
    if results[base].runs.is_empty() {
        return None;
    }
    let others: Vec<usize> = (0..opts.programs.len()).filter(|&i| i != base && !results[i].runs.is_empty()).collect();
    if others.is_empty() {
        return None;
    }
    let name = |i: usize| opts.programs[i].name.as_str();
    let mut out = String::new();
    let _ = writeln!(out, "\n## Comparison (medians; ratio = program / {})\n", name(base));
    let mut header = format!("| figure | {} |", name(base));
    let mut rule = String::from("| --- | ---: |");
    for &i in &others {
        let _ = write!(header, " {} | {} / {} |", name(i), name(i), name(base));
        rule.push_str(" ---: | ---: |");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for f in figs {
        // Counts of keys are the same by design; a ratio of them says nothing.
        if f.label.starts_with("keys ") {
            continue;
        }
        let median = |i: usize| stats(&values(&results[i].runs, f)).map(|s| s.median);
        let Some(b) = median(base) else { continue };
        let d = f.decimals;
        let _ = write!(out, "| {} | {b:.d$} |", f.label);
        for &i in &others {
            let Some(m) = median(i) else {
                out.push_str(" — | — |");
                continue;
            };
            let ratio = if b > 0.0 { format!("{:.1}×", m / b) } else { format!("n/a ({} is 0)", name(base)) };
            let _ = write!(out, " {m:.d$} | {ratio} |");
        }
        out.push('\n');
    }
    Some(out)
}

fn machine_info() -> String {
    let cpus = thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown memory".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} CPUs (nproc), {model}, {mem_gib} RAM, Linux {}", kernel.trim())
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_=./:,@+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `YYYY-MM-DD HH:MM UTC` without a date crate (days-to-civil, Howard Hinnant's algorithm).
fn utc_string(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}
