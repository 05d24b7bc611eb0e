//! The `talaria` binary: parse the command line, load config, start logging, pick a mode.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use talaria::config::Config;
use talaria::engine::approval::PromptPolicy;
use talaria::engine::llm::provider;
use talaria::engine::store::{SessionSummary, Store};
use talaria::engine::{EngineOptions, SessionChoice};
use talaria::paths::Paths;

#[derive(Parser, Debug)]
#[command(name = "talaria", version, about = "A full-screen terminal AI agent you never wait for")]
struct Cli {
    #[command(flatten)]
    model: ModelArgs,
    /// Continue the most recent interactive session started in this directory.
    #[arg(short = 'c', long = "continue")]
    continue_session: bool,
    /// Resume a session by id, id prefix or title.
    #[arg(long, value_name = "ID|TITLE", conflicts_with = "continue_session")]
    resume: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Which model to talk to: only the interactive mode and `exec` take these (the other
/// subcommands never talk to a model, so their help does not offer them).
#[derive(clap::Args, Debug, Clone, Default)]
struct ModelArgs {
    /// Model name for this run (overrides `[model] name`).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Model server base URL for this run, e.g. http://127.0.0.1:8080/v1.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Wire protocol for this run (overrides `[model] provider`).
    #[arg(long, value_name = "auto|openai|anthropic", value_parser = ["auto", "openai", "anthropic"])]
    provider: Option<String>,
    /// Where commands run for this run: local, ssh:<host> or docker:<container>
    /// (overrides `[terminal] backend` and the session's own choice).
    #[arg(long, value_name = "BACKEND")]
    backend: Option<String>,
}

impl ModelArgs {
    /// These, with `outer`'s (given before the subcommand) where these say nothing.
    fn or(self, outer: &ModelArgs) -> ModelArgs {
        ModelArgs {
            model: self.model.or_else(|| outer.model.clone()),
            base_url: self.base_url.or_else(|| outer.base_url.clone()),
            provider: self.provider.or_else(|| outer.provider.clone()),
            backend: self.backend.or_else(|| outer.backend.clone()),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one prompt headless: the answer on stdout, tool activity on stderr.
    Exec {
        /// Print every event as one JSON line.
        #[arg(long)]
        json: bool,
        /// Allow commands that would need approval (hardline ones are still refused).
        #[arg(long)]
        yes: bool,
        /// Continue the most recent session started in this directory (exec or not).
        #[arg(short = 'c', long = "continue")]
        continue_session: bool,
        #[command(flatten)]
        model: ModelArgs,
        /// Leave background jobs running when the run ends (`talaria jobs` finds them).
        #[arg(long)]
        keep_jobs: bool,
        /// The prompt; `-` reads it from stdin.
        #[arg(required = true, num_args = 1.., value_name = "PROMPT")]
        prompt: Vec<String>,
    },
    /// List or search saved sessions.
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsAction>,
    },
    /// Pause all autonomous work in every talaria: no heartbeat, goal, queued message or
    /// job notice runs, and typed messages wait, until `talaria unpause`.
    ///
    /// Example: `talaria pause lunch break` (or `--reason "lunch break"`).
    Pause {
        /// Why, shown in every talaria's notice.
        #[arg(value_name = "REASON", num_args = 0.., conflicts_with = "reason")]
        words: Vec<String>,
        /// The same as REASON, as an option.
        #[arg(long, value_name = "REASON")]
        reason: Option<String>,
    },
    /// Lift a pause.
    Unpause,
    /// Background jobs of every session: list them, read a log, kill one.
    Jobs {
        #[command(subcommand)]
        action: Option<JobsAction>,
        /// JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
        /// Print job output and commands as they are, escape sequences included (on a
        /// terminal they are otherwise removed; a pipe always gets them raw).
        #[arg(long, global = true)]
        raw: bool,
    },
    /// Go back to before a turn of a session: `talaria rewind list`, `talaria rewind <n>`.
    ///
    /// `<n>` is the number `list` gives; without --yes it only prints what it would restore
    /// (and exits 1). The session defaults to the last one in this directory.
    #[command(args_conflicts_with_subcommands = true)]
    Rewind {
        #[command(subcommand)]
        action: Option<RewindAction>,
        /// Go back to before this turn (as `talaria rewind list` numbers them, from 1).
        #[arg(value_name = "N")]
        n: Option<usize>,
        /// The session (id, id prefix or title); default: the last one in this directory.
        #[arg(long, global = true)]
        session: Option<String>,
        /// Put back only the files (the conversation stays).
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        code: bool,
        /// Put back only the conversation (the files stay).
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Files and conversation (the default).
        #[arg(long)]
        both: bool,
        /// Do it (without: print what it would restore and exit 1).
        #[arg(long)]
        yes: bool,
        /// Also put back the paths you changed yourself since (kept by default).
        #[arg(long)]
        all: bool,
        /// JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
    /// MCP servers from config.toml (`[mcp.servers.<name>]`).
    Mcp {
        #[command(subcommand)]
        action: Option<McpAction>,
    },
    /// A sub-agent, started by the `agent` tool (its task comes over stdin).
    #[command(name = "__agent", hide = true)]
    Agent {
        /// The session its parent made for it.
        #[arg(long)]
        session: String,
        #[arg(long, default_value_t = 1)]
        depth: u32,
    },
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, Neovim,
    /// JetBrains): `"command": "talaria", "args": ["acp"]` in the editor's agent settings.
    Acp {
        #[command(flatten)]
        model: ModelArgs,
    },
}

#[derive(Subcommand, Debug)]
enum RewindAction {
    /// The session's turns (and rewinds), numbered from 1, with the paths each changed.
    List,
}

#[derive(Subcommand, Debug)]
enum McpAction {
    /// Start every configured MCP server, then print its state, tool count and last error.
    List {
        /// Also list each server's tools as the model sees them.
        #[arg(long)]
        tools: bool,
    },
}

#[derive(Subcommand, Debug)]
enum JobsAction {
    /// The most recent jobs, running ones first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// The end of a job's log.
    Log {
        id: String,
        #[arg(long, default_value_t = 200)]
        lines: usize,
        /// Keep printing what the job writes until it ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Kill a job's process group (SIGTERM, grace, SIGKILL).
    Kill { id: String },
}

#[derive(Subcommand, Debug)]
enum SessionsAction {
    /// The most recent sessions.
    List {
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Full-text search over every message.
    Search {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(required = true)]
        query: Vec<String>,
    },
}

fn main() {
    talaria::one_malloc_arena();
    // The supervisor of one job: no tokio, no config, no logging (DESIGN §4).
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "__job") {
        match args.next() {
            Some(dir) => talaria::engine::jobs::supervisor::run(std::path::Path::new(&dir)),
            None => std::process::exit(2),
        }
    }
    // The session's network proxy, outliving talaria for kept jobs (src/engine/netproxy/service.rs).
    if std::env::args_os().nth(1).is_some_and(|a| a == talaria::engine::netproxy::service::ARG) {
        talaria::engine::netproxy::service::run();
    }
    // The sandboxed file-tool helper: no tokio, no config (src/engine/tools/fs_helper.rs).
    if std::env::args_os().nth(1).is_some_and(|a| a == talaria::engine::tools::fs_helper::ARG) {
        talaria::engine::tools::fs_helper::run();
    }
    // The guard of one stdio MCP server: no tokio either (src/engine/mcp/guard.rs).
    if std::env::args_os().nth(1).is_some_and(|a| a == talaria::engine::mcp::guard::ARG) {
        talaria::engine::mcp::guard::run(std::env::args_os().skip(2).collect());
    }
    // Before any thread starts: re-exec without the provider keys in the environment, so
    // no command can read them from /proc/<talaria>/environ (DESIGN §6). The config read
    // for their names is the one the run uses (read once).
    let load = || {
        Paths::from_env().map(|paths| {
            let config = Config::load(&paths.config_file);
            (paths, config)
        })
    };
    let mut early = load();
    let model = early.as_ref().ok().and_then(|(_, c)| c.as_ref().ok()).map(|c| c.model.clone());
    let key_names = provider::secret_env_vars(&model.unwrap_or_default());
    if std::env::args_os().nth(1).is_some_and(|a| a == talaria::engine::agents::ARG) {
        // A sub-agent: its keys and task come over stdin from its parent, with the parent's
        // TALARIA_HOME, whose paths and config are the ones it runs with.
        talaria::subagent::take_hello(&key_names);
        early = load();
    } else {
        talaria::secrets::drop_keys_from_environment(&key_names);
    }
    let cli = Cli::parse();
    let code = match real_main(cli, early) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("talaria: {}", talaria::text::for_terminal(&format!("{e:#}")));
            1
        }
    };
    std::process::exit(code);
}

fn real_main(
    cli: Cli,
    early: anyhow::Result<(Paths, Result<Config, talaria::config::ConfigError>)>,
) -> anyhow::Result<i32> {
    let (paths, config) = early?;
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("talaria: {}", talaria::text::for_terminal(&e.to_string()));
            return Ok(2);
        }
    };
    // The keymap is the TUI's config: a bad one is reported the same way, with exit 2.
    if cli.command.is_none() {
        if let Err(e) = talaria::tui::check_keymap(&paths) {
            eprintln!("talaria: {}", talaria::text::for_terminal(&e.to_string()));
            return Ok(2);
        }
    }
    match &cli.command {
        Some(Command::Pause { words, reason }) => {
            let reason = reason.clone().or_else(|| (!words.is_empty()).then(|| words.join(" ")));
            talaria::engine::estop::pause(&paths.estop, reason.as_deref())?;
            println!("paused ({}); `talaria unpause` lifts it", paths.estop.display());
            return Ok(0);
        }
        Some(Command::Unpause) => {
            talaria::engine::estop::unpause(&paths.estop)?;
            println!("unpaused");
            return Ok(0);
        }
        _ => {}
    }
    paths.check_test_guard()?;
    paths.ensure_dirs().with_context(|| format!("cannot create {}", paths.jobs_dir.display()))?;
    let _log_guard = talaria::logging::init(&paths.logs_dir)?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "talaria starting");
    let mut config = config;
    let mut model = match &cli.command {
        Some(Command::Exec { model, .. }) => model.clone().or(&cli.model),
        Some(Command::Acp { model }) => model.clone().or(&cli.model),
        _ => cli.model.clone(),
    };
    if let (Some(Command::Agent { depth, .. }), Some(hello)) = (&cli.command, talaria::subagent::hello()) {
        talaria::subagent::apply(&mut config, hello, *depth)?;
        // The parent's `/pause` holds it between model calls (the same TALARIA_HOME).
        config.agents.pause_file = Some(paths.estop.clone());
        model.model = hello.model.clone().or(model.model);
        model.base_url = hello.base_url.clone().or(model.base_url);
    }
    config.agents.run_model = model.model.clone();
    config.agents.run_base_url = model.base_url.clone();
    if let Some(provider) = &model.provider {
        config.model.provider = provider.parse().map_err(|e: String| anyhow::anyhow!("--provider: {e}"))?;
    }
    if let Some(backend) = &model.backend {
        let parsed = talaria::protocol::Backend::parse(backend).map_err(|e| anyhow::anyhow!("--backend: {e}"))?;
        config.terminal.backend = parsed;
        config.terminal.backend_from_flag = true;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(async_main(cli, model, paths, Arc::new(config)));
    // Do not wait for stray blocking tasks (a stuck stdin read) on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

/// What `--resume KEY` opens: the one session KEY names, or — when it fits several (an id
/// prefix, a title two sessions share, title words) — `None` with the matches, never the
/// latest of them silently.
async fn resume_choice(store: &Store, key: &str) -> anyhow::Result<Result<SessionChoice, Vec<SessionSummary>>> {
    use talaria::engine::store::cli::{resume_match, ResumeMatch};
    Ok(match resume_match(store, key).await? {
        ResumeMatch::One(s) => Ok(SessionChoice::Resume(s.id)),
        ResumeMatch::Several(matches) => Err(matches),
        // The engine says that nothing matches (and how to list them).
        ResumeMatch::None => Ok(SessionChoice::Resume(key.to_string())),
    })
}

/// `exec --resume KEY` that fits several sessions: it cannot ask, so it lists them (exit 2).
fn list_resume_matches(key: &str, matches: &[SessionSummary]) {
    eprintln!("talaria: '{key}' matches several sessions; resume one by its full id:");
    for s in matches.iter().take(20) {
        let label = s.title.clone().unwrap_or_else(|| s.first_line.clone());
        eprintln!("  {}  {}", s.id, talaria::text::for_terminal(&label));
    }
}

async fn async_main(cli: Cli, model: ModelArgs, paths: Paths, config: Arc<Config>) -> anyhow::Result<i32> {
    tokio::spawn(talaria::logging::runtime_counters_on_usr1());
    let Cli { command, continue_session: continue_flag, resume, .. } = cli;
    // The TUI opens the store beside taking the terminal (`run_tui`).
    let Some(command) = command else {
        return run_tui(continue_flag, resume, &model, &paths, &config).await;
    };
    // Listing and searching only read: they work on a read-only database too.
    let open = if matches!(command, Command::Sessions { .. }) { Store::open_read_only } else { Store::open };
    let store = open(&paths.state_db).with_context(|| format!("cannot open {}", paths.state_db.display()))?;
    match command {
        Command::Sessions { action } => sessions(&store, action).await,
        Command::Exec { json, yes, continue_session, keep_jobs, prompt, model: _ } => {
            let prompt = if prompt == ["-"] {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text).context("cannot read the prompt from stdin")?;
                text
            } else {
                prompt.join(" ")
            };
            if prompt.trim().is_empty() {
                anyhow::bail!("the prompt is empty");
            }
            let session = if continue_session || continue_flag {
                SessionChoice::Continue
            } else if let Some(key) = resume.clone() {
                match resume_choice(&store, &key).await? {
                    Ok(choice) => choice,
                    Err(matches) => {
                        list_resume_matches(&key, &matches);
                        return Ok(2);
                    }
                }
            } else {
                SessionChoice::New
            };
            let policy = if yes { PromptPolicy::AllowUnattended } else { PromptPolicy::DenyUnattended };
            let (engine, resolved) =
                start_engine(&model.model, &model.base_url, &paths, &config, store, session, policy).await?;
            if resolved.demo {
                eprintln!("{}", talaria::engine::llm::demo::DEMO_BANNER);
            }
            let code = talaria::exec::run(
                engine,
                prompt,
                talaria::exec::ExecOptions { json, keep_jobs, wait_when_paused: false },
            )
            .await?;
            drop(resolved);
            Ok(code)
        }
        Command::Jobs { action, json, raw } => {
            use talaria::engine::jobs::cli;
            let action = match action {
                None => cli::JobsCli::List { limit: 50 },
                Some(JobsAction::List { limit }) => cli::JobsCli::List { limit },
                Some(JobsAction::Log { id, lines, follow }) => cli::JobsCli::Log { id, lines, follow },
                Some(JobsAction::Kill { id }) => cli::JobsCli::Kill { id },
            };
            cli::run(&paths, &config, &store, action, json, raw).await
        }
        Command::Rewind { action, n, session, code, conversation, both: _, yes, all, json } => {
            use talaria::engine::rewind::cli::{self, RewindCli};
            use talaria::protocol::rewind::RewindMode;
            let action = match (action, n) {
                (Some(RewindAction::List), _) => RewindCli::List,
                (None, Some(n)) => {
                    let mode = if code {
                        RewindMode::Code
                    } else if conversation {
                        RewindMode::Conversation
                    } else {
                        RewindMode::Both
                    };
                    RewindCli::To { n, mode, yes, include_user: all }
                }
                (None, None) => anyhow::bail!(
                    "usage: talaria rewind list | talaria rewind <n> [--code|--conversation|--both] [--yes]"
                ),
            };
            cli::run(&paths, &config, &store, session, action, json).await
        }
        Command::Mcp { action } => {
            let tools = matches!(action, Some(McpAction::List { tools: true }));
            let cwd: PathBuf = std::env::current_dir().context("cannot read the working directory")?;
            let (events, _rx) = talaria::engine::EventSink::channel();
            let mcp = talaria::engine::mcp::McpHandle::new(config.clone(), &paths.logs_dir, cwd, events, true);
            mcp.begin();
            mcp.wait_for_startup(&tokio_util::sync::CancellationToken::new()).await;
            println!("{}", talaria::text::for_terminal(&talaria::present::mcp_status(&mcp.status(), tools)));
            mcp.shutdown().await;
            Ok(0)
        }
        Command::Acp { .. } => {
            let starter = AcpStarter::new(&model, &paths, &config, store.clone()).await?;
            let options = talaria::acp::AcpOptions { config: config.clone(), store, starter: Arc::new(starter) };
            talaria::acp::run(options).await
        }
        Command::Agent { session, .. } => {
            let hello = talaria::subagent::hello().context("a sub-agent has no task")?;
            let choice = SessionChoice::Resume(session);
            let (engine, resolved) =
                start_engine(&model.model, &model.base_url, &paths, &config, store, choice, PromptPolicy::Ask).await?;
            let code = talaria::subagent::run(engine, hello).await?;
            drop(resolved);
            Ok(code)
        }
        Command::Pause { .. } | Command::Unpause => Ok(0),
    }
}

/// `talaria sessions [list|search]`: print them; a search that finds nothing exits 1, as
/// grep does.
async fn sessions(store: &Store, action: Option<SessionsAction>) -> anyhow::Result<i32> {
    let text = match action {
        None => talaria::engine::store::cli::cli_list(store, 20).await?,
        Some(SessionsAction::List { limit }) => talaria::engine::store::cli::cli_list(store, limit).await?,
        Some(SessionsAction::Search { limit, query }) => {
            let found = talaria::engine::store::cli::cli_search(store, &query.join(" "), limit).await?;
            print!("{}", found.text);
            return Ok(if found.found { 0 } else { 1 });
        }
    };
    print!("{text}");
    Ok(0)
}

/// `talaria` in a terminal: take the terminal, start the engine, run the TUI.
async fn run_tui(
    continue_session: bool,
    resume: Option<String>,
    model: &ModelArgs,
    paths: &Paths,
    config: &Arc<Config>,
) -> anyhow::Result<i32> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!("not a terminal; use `talaria exec`");
    }
    // The store opens (and on a first start creates its schema) on a thread of its own
    // while the terminal is taken and the model resolved: none waits for the others.
    let db = paths.state_db.clone();
    let store = tokio::task::spawn_blocking(move || Store::open(&db));
    // The sandbox's probes fork children: done on another thread while the store opens.
    tokio::task::spawn_blocking(talaria::engine::sandbox::probe_ahead);
    let options = talaria::tui::TuiOptions { config: config.clone(), paths: paths.clone(), banner: None };
    let mut screen = talaria::tui::Screen::open(options)?;
    tracing::debug!("start: terminal taken");
    let starting = start_tui_engine(continue_session, resume, model, paths, config, store);
    tokio::pin!(starting);
    // The first frame waits for the session and its status, a moment at most: when
    // start-up takes longer (a remote server asked for its models), the frame is drawn
    // with what is known and fills in later. An error drops the screen (the terminal is
    // restored) before it is reported.
    let started = match tokio::time::timeout_at(screen.first_frame_due(), &mut starting).await {
        Ok(started) => started,
        Err(_) => {
            screen.draw_first_frame()?;
            starting.await
        }
    };
    let (engine, resolved) = started?;
    let banner = resolved.demo.then(|| talaria::engine::llm::demo::DEMO_BANNER.to_string());
    let exit = screen.run(engine, banner).await?;
    if let Some(spend) = &exit.spend {
        println!("This run: {spend}");
    }
    if let Some(kept) = exit.kept_jobs_line() {
        println!("{kept}");
    }
    if let Some(id) = exit.session_id {
        println!("Resume this session with: talaria --resume {id}");
    }
    drop(resolved);
    Ok(0)
}

/// The TUI's engine: the model resolved while the store opens, then the session chosen
/// (a `--resume` that fits several sessions opens the picker, as `/resume` does).
async fn start_tui_engine(
    continue_session: bool,
    resume: Option<String>,
    model: &ModelArgs,
    paths: &Paths,
    config: &Arc<Config>,
    store: tokio::task::JoinHandle<Result<Store, talaria::engine::store::StoreError>>,
) -> anyhow::Result<(talaria::protocol::EngineHandle, provider::ResolvedProvider)> {
    let resolved = resolve_model(&model.model, &model.base_url, config).await?;
    let opened = store.await.context("the database thread failed")?;
    let store = opened.with_context(|| format!("cannot open {}", paths.state_db.display()))?;
    tracing::debug!("start: store open");
    let mut pick: Option<String> = None;
    let session = if continue_session {
        SessionChoice::ContinueInteractive
    } else if let Some(key) = resume {
        match resume_choice(&store, &key).await? {
            Ok(choice) => choice,
            Err(_) => {
                pick = Some(key);
                SessionChoice::New
            }
        }
    } else {
        SessionChoice::New
    };
    let engine = start_with(resolved, paths, config, store, session, PromptPolicy::Ask).await?;
    if let Some(key) = pick {
        let resume = talaria::protocol::commands::SlashCommand::Resume(Some(key));
        let _ = engine.0.ops.send(talaria::protocol::Op::Command(resume));
    }
    Ok(engine)
}

/// The model to talk to (`--model`, `--base-url`, the config, the environment's keys).
async fn resolve_model(
    cli_model: &Option<String>,
    cli_base_url: &Option<String>,
    config: &Config,
) -> anyhow::Result<provider::ResolvedProvider> {
    // Keys come from what the start-up re-exec handed over, not from the environment.
    let env = |name: &str| talaria::secrets::get(name);
    let resolved =
        provider::resolve(&config.model, cli_model.as_deref(), cli_base_url.as_deref(), &config.agent, &env).await?;
    tracing::info!(provider = %resolved.label, model = %resolved.model, "model resolved");
    Ok(resolved)
}

async fn start_engine(
    cli_model: &Option<String>,
    cli_base_url: &Option<String>,
    paths: &Paths,
    config: &Arc<Config>,
    store: Store,
    session: SessionChoice,
    policy: PromptPolicy,
) -> anyhow::Result<(talaria::protocol::EngineHandle, provider::ResolvedProvider)> {
    let resolved = resolve_model(cli_model, cli_base_url, config).await?;
    start_with(resolved, paths, config, store, session, policy).await
}

/// Start the engine on the resolved model.
async fn start_with(
    resolved: provider::ResolvedProvider,
    paths: &Paths,
    config: &Arc<Config>,
    store: Store,
    session: SessionChoice,
    policy: PromptPolicy,
) -> anyhow::Result<(talaria::protocol::EngineHandle, provider::ResolvedProvider)> {
    let cwd: PathBuf = std::env::current_dir().context("cannot read the working directory")?;
    let options = EngineOptions {
        config: config.clone(),
        paths: paths.clone(),
        provider: resolved.provider.clone(),
        model: resolved.model.clone(),
        provider_label: resolved.label.clone(),
        demo: resolved.demo,
        store,
        session,
        cwd,
        approval_policy: policy,
        reaper: true,
        inherited_sandbox: talaria::subagent::hello().and_then(talaria::subagent::inherited_sandbox),
    };
    let (handle, join) = talaria::engine::start(options).await?;
    // A panic in the engine task is fatal: like any crash, it leaves the jobs to their
    // supervisors, which wait `jobs.orphan_grace_s` for a `talaria -c` and then kill them.
    tokio::spawn(async move {
        if let Err(e) = join.await {
            if e.is_panic() {
                talaria::tui::restore();
                eprintln!("talaria: the engine crashed; see the log. Exiting.");
                std::process::exit(101);
            }
        }
    });
    Ok((handle, resolved))
}

/// How `talaria acp` starts each session's engine: the provider is resolved once, and every
/// engine asks its approvals of the front end (the editor), like the TUI's.
struct AcpStarter {
    paths: Paths,
    config: Arc<Config>,
    store: Store,
    resolved: provider::ResolvedProvider,
}

impl AcpStarter {
    async fn new(model: &ModelArgs, paths: &Paths, config: &Arc<Config>, store: Store) -> anyhow::Result<AcpStarter> {
        let env = |name: &str| talaria::secrets::get(name);
        let resolved =
            provider::resolve(&config.model, model.model.as_deref(), model.base_url.as_deref(), &config.agent, &env)
                .await?;
        tracing::info!(provider = %resolved.label, model = %resolved.model, "acp: model resolved");
        Ok(AcpStarter { paths: paths.clone(), config: config.clone(), store, resolved })
    }
}

#[async_trait::async_trait]
impl talaria::acp::EngineStarter for AcpStarter {
    async fn start(&self, session: SessionChoice, cwd: PathBuf) -> anyhow::Result<talaria::protocol::EngineHandle> {
        let options = EngineOptions {
            config: self.config.clone(),
            paths: self.paths.clone(),
            provider: self.resolved.provider.clone(),
            model: self.resolved.model.clone(),
            provider_label: self.resolved.label.clone(),
            demo: self.resolved.demo,
            store: self.store.clone(),
            session,
            cwd,
            approval_policy: PromptPolicy::Ask,
            reaper: true,
            inherited_sandbox: None,
        };
        let (handle, join) = talaria::engine::start(options).await?;
        // An engine that asks its front end starts MCP servers after the first frame; an
        // editor draws none, so they start now.
        let _ = handle.ops.send(talaria::protocol::Op::FrontEndReady);
        // A panic in an engine is fatal, as in the TUI; stdout is the protocol's, so the
        // message goes to stderr and the log.
        tokio::spawn(async move {
            if let Err(e) = join.await {
                if e.is_panic() {
                    tracing::error!("acp: an engine crashed");
                    eprintln!("talaria: the engine crashed; see the log. Exiting.");
                    std::process::exit(101);
                }
            }
        });
        Ok(handle)
    }

    async fn models(&self) -> Vec<String> {
        let listed =
            tokio::time::timeout(std::time::Duration::from_secs(3), self.resolved.provider.list_models()).await;
        match listed {
            Ok(Ok(models)) => models,
            Ok(Err(_)) | Err(_) => Vec::new(),
        }
    }
}
