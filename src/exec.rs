//! Headless mode (`talaria exec`): the same engine, printing instead of drawing.
//! The answer streams to stdout, tool activity and notices to stderr; `--json` prints
//! every `Event` as one JSON line. Exit codes: 0 done, 1 failed, 130 interrupted.

use std::io::Write;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use crate::protocol::EngineHandle;
use crate::protocol::{Event, NoticeLevel, Op, TurnOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    pub json: bool,
}

/// Send `prompt`, print until the turn (and any turns it triggers) ends, shut down.
/// Returns the process exit code.
pub async fn run(mut engine: EngineHandle, prompt: String, options: ExecOptions) -> anyhow::Result<i32> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let _ = engine.ops.send(Op::Submit { text: prompt.clone(), mode: None });
    let mut printer = Printer { json: options.json, mid_line: false };
    let mut outcome: Option<TurnOutcome> = None;
    let mut interrupted = false;
    let mut submitted = false;
    loop {
        tokio::select! {
            event = engine.events.recv() => {
                let Some(event) = event else { break };
                match &event {
                    Event::TurnStarted { .. } => submitted = true,
                    Event::TurnFinished { outcome: o } => {
                        outcome = Some(*o);
                        // exec runs one turn; stop before a job notification could start another.
                        let _ = engine.ops.send(Op::Shutdown);
                    }
                    Event::RestoreInput { text } if !submitted && *text == prompt => {
                        // Our prompt came back unsent (e.g. paused).
                        outcome = Some(TurnOutcome::Failed);
                        let _ = engine.ops.send(Op::Shutdown);
                    }
                    _ => {}
                }
                let done = matches!(event, Event::ShutdownComplete);
                printer.print(&event)?;
                if done {
                    break;
                }
            }
            _ = sigint.recv() => {
                if interrupted {
                    let _ = engine.ops.send(Op::Shutdown);
                } else {
                    interrupted = true;
                    eprintln!("talaria: interrupting (Ctrl+C again to quit at once)");
                    let _ = engine.ops.send(Op::Interrupt);
                }
            }
            _ = sigterm.recv() => { interrupted = true; let _ = engine.ops.send(Op::Shutdown); }
            _ = sighup.recv() => { interrupted = true; let _ = engine.ops.send(Op::Shutdown); }
        }
    }
    printer.end_line();
    // Drain anything printed after shutdown began, without waiting long.
    let _ = tokio::time::timeout(Duration::from_millis(50), async {
        while let Some(event) = engine.events.recv().await {
            let _ = printer.print(&event);
        }
    })
    .await;
    Ok(match outcome {
        Some(TurnOutcome::Completed) => 0,
        Some(TurnOutcome::Interrupted) => 130,
        Some(TurnOutcome::Failed) | Some(TurnOutcome::BudgetExhausted) => 1,
        None if interrupted => 130,
        None => 1,
    })
}

struct Printer {
    json: bool,
    /// The last thing written to stdout did not end with a newline.
    mid_line: bool,
}

impl Printer {
    fn print(&mut self, event: &Event) -> anyhow::Result<()> {
        if self.json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, event)?;
            out.write_all(b"\n")?;
            out.flush()?;
            return Ok(());
        }
        match event {
            Event::AssistantDelta(text) => {
                let mut out = std::io::stdout().lock();
                out.write_all(crate::text::strip_ansi(text).as_bytes())?;
                out.flush()?;
                self.mid_line = !text.ends_with('\n');
            }
            Event::AssistantDone { .. } => self.end_line(),
            Event::ToolStarted { name, summary, .. } => {
                self.end_line();
                eprintln!("▸ {name} {summary}");
            }
            Event::ToolFinished { outcome, .. } => {
                let mark = if outcome.ok { "✓" } else { "✗" };
                let code = outcome.exit_code.map(|c| format!(" exit {c}")).unwrap_or_default();
                let status = outcome.status.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
                eprintln!("  {mark}{code}{status} ({:.1}s)", outcome.duration_ms as f64 / 1000.0);
            }
            Event::ApprovalNeeded { command, reason, .. } => {
                eprintln!("talaria: approval needed for `{command}`: {reason}")
            }
            Event::JobStarted { job } => eprintln!("  ↳ {} running in the background: {}", job.id, job.command),
            Event::JobFinished { id, status } => eprintln!("  ↳ {id} {}", status.label()),
            Event::Notice { level, text } => {
                self.end_line();
                let prefix = match level {
                    NoticeLevel::Info => "talaria",
                    NoticeLevel::Warn => "talaria: warning",
                    NoticeLevel::Error => "talaria: error",
                };
                eprintln!("{prefix}: {text}");
            }
            Event::SessionReady { .. }
            | Event::TurnStarted { .. }
            | Event::UserMessage { .. }
            | Event::PendingChanged { .. }
            | Event::RestoreInput { .. }
            | Event::ReasoningDelta(_)
            | Event::ToolOutput { .. }
            | Event::JobUpdated { .. }
            | Event::JobLog { .. }
            | Event::TurnFinished { .. }
            | Event::Status(_)
            | Event::Usage { .. }
            | Event::Context { .. }
            | Event::ShutdownComplete => {}
        }
        Ok(())
    }

    fn end_line(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }
}
