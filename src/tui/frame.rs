//! Redraw on demand: anyone holding a `FrameRequester` asks for a frame; a small task
//! merges the requests into one draw notification, at most 60 per second. Nothing asks
//! for frames on a timer, so an idle TUI writes nothing.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// The shortest time between two scheduled frames (60 fps).
pub(crate) const MIN_FRAME_INTERVAL: Duration = Duration::from_nanos(16_666_667);

#[derive(Clone, Debug)]
pub(crate) struct FrameRequester {
    tx: mpsc::UnboundedSender<Instant>,
}

impl FrameRequester {
    /// Start the scheduler task; the receiver gets one `()` per frame to draw.
    pub(crate) fn spawn() -> (FrameRequester, mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (draw_tx, draw_rx) = mpsc::unbounded_channel();
        tokio::spawn(schedule(rx, draw_tx));
        (FrameRequester { tx }, draw_rx)
    }

    /// Draw as soon as the frame-rate cap allows.
    pub(crate) fn schedule_frame(&self) {
        let _ = self.tx.send(Instant::now());
    }

    /// Draw no earlier than `delay` from now (spinner ticks).
    #[cfg(test)]
    pub(crate) fn schedule_frame_in(&self, delay: Duration) {
        let _ = self.tx.send(Instant::now() + delay);
    }
}

async fn schedule(mut requests: mpsc::UnboundedReceiver<Instant>, draws: mpsc::UnboundedSender<()>) {
    let mut next: Option<Instant> = None;
    let mut last_emit: Option<Instant> = None;
    loop {
        let target = next.map(|at| match last_emit {
            Some(last) => at.max(last + MIN_FRAME_INTERVAL),
            None => at,
        });
        tokio::select! {
            request = requests.recv() => match request {
                Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                None => break,
            },
            () = sleep_until_opt(target), if target.is_some() => {
                next = None;
                last_emit = Some(Instant::now());
                if draws.send(()).is_err() {
                    break;
                }
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn count_draws(rx: &mut mpsc::UnboundedReceiver<()>) -> usize {
        // Let the scheduler run; with paused time this advances the clock as needed.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        n
    }

    #[tokio::test(start_paused = true)]
    async fn requests_merge_into_one_frame() {
        let (req, mut rx) = FrameRequester::spawn();
        for _ in 0..10 {
            req.schedule_frame();
        }
        assert_eq!(count_draws(&mut rx).await, 1);
        assert_eq!(count_draws(&mut rx).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn frames_are_capped_at_60_per_second() {
        let (req, mut rx) = FrameRequester::spawn();
        req.schedule_frame();
        assert_eq!(count_draws(&mut rx).await, 1);
        let first = Instant::now();
        req.schedule_frame();
        rx.recv().await.expect("a second frame");
        assert!(Instant::now() - first >= MIN_FRAME_INTERVAL - Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_frames_wait() {
        let (req, mut rx) = FrameRequester::spawn();
        let start = Instant::now();
        req.schedule_frame_in(Duration::from_millis(100));
        rx.recv().await.expect("a frame");
        assert!(Instant::now() - start >= Duration::from_millis(100));
        assert_eq!(count_draws(&mut rx).await, 0);
    }
}
