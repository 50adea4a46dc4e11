//! The compute thread: owns the [`Scheduler`], takes jobs from the async
//! handlers over a channel, and streams their events back. Model compute
//! never runs on the async runtime.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use redlite_engine::{Event, Request, Scheduler, SchedulerStats, Sink};
use tokio::sync::mpsc;

/// What the metrics endpoint reads about the engine.
#[derive(Clone, Debug, Default)]
pub struct EngineStatus {
    pub stats: SchedulerStats,
    pub running: usize,
    pub waiting: usize,
    pub snapshots: usize,
    /// Bytes held by snapshots, each shared KV block once.
    pub snapshot_bytes: usize,
    /// Bytes the snapshots would hold as separate copies.
    pub snapshot_logical_bytes: usize,
}

struct Job {
    req: Request,
    sink: ChannelSink,
}

/// A request's sink: an unbounded channel to its handler plus a cancel flag
/// (set by the handler, e.g. when a stop string matched). A handler that
/// goes away (the client disconnected) closes the channel, which cancels too.
struct ChannelSink {
    tx: mpsc::UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
}

impl Sink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        self.tx.send(event).is_ok()
    }
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.tx.is_closed()
    }
}

/// The handlers' side of the engine.
#[derive(Clone)]
pub struct EngineHandle {
    jobs: std_mpsc::Sender<Job>,
    status: Arc<Mutex<EngineStatus>>,
    /// Requests submitted and not yet in a slot (or dropped).
    pending: Arc<AtomicUsize>,
    slots: usize,
}

/// Why a request was not queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// This many requests already wait for a slot (the queue bound).
    QueueFull(usize),
    /// The compute thread is gone.
    Stopped,
}

/// A submitted request: its events, and the switch that stops it.
pub struct Submitted {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub cancel: Arc<AtomicBool>,
}

impl Drop for Submitted {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl EngineHandle {
    /// Start the compute thread around `scheduler`, which has `slots`
    /// sequences.
    pub fn spawn(scheduler: Scheduler, slots: usize) -> std::io::Result<EngineHandle> {
        let (tx, rx) = std_mpsc::channel::<Job>();
        let status = Arc::new(Mutex::new(EngineStatus::default()));
        let pending = Arc::new(AtomicUsize::new(0));
        let st = status.clone();
        let p = pending.clone();
        std::thread::Builder::new()
            .name("redlite-engine".into())
            .spawn(move || run(scheduler, rx, st, p))?;
        Ok(EngineHandle {
            jobs: tx,
            status,
            pending,
            slots,
        })
    }

    /// Queue a request (first come, first served), unless `max_queue`
    /// requests already wait for a slot beyond the free ones.
    pub fn submit(&self, req: Request, max_queue: usize) -> Result<Submitted, SubmitError> {
        let free = self.slots.saturating_sub(self.status().running);
        let waiting = self.pending.load(Ordering::Relaxed);
        if waiting >= free + max_queue {
            return Err(SubmitError::QueueFull(waiting.saturating_sub(free)));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sink = ChannelSink {
            tx,
            cancel: cancel.clone(),
        };
        self.pending.fetch_add(1, Ordering::Relaxed);
        if self.jobs.send(Job { req, sink }).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(SubmitError::Stopped);
        }
        if let Ok(mut s) = self.status.lock() {
            s.waiting += 1;
        }
        Ok(Submitted { events: rx, cancel })
    }

    pub fn status(&self) -> EngineStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn run(
    mut sched: Scheduler,
    rx: std_mpsc::Receiver<Job>,
    status: Arc<Mutex<EngineStatus>>,
    pending: Arc<AtomicUsize>,
) {
    let mut queue: VecDeque<Job> = VecDeque::new();
    loop {
        // Take what has arrived; block only when there is nothing to do.
        if sched.active() == 0 && queue.is_empty() {
            match rx.recv() {
                Ok(j) => queue.push_back(j),
                Err(_) => return,
            }
        }
        while let Ok(j) = rx.try_recv() {
            queue.push_back(j);
        }
        // Requests whose client left while queued never start.
        let before = queue.len();
        queue.retain(|j| !j.sink.cancelled());
        let mut left = before - queue.len();
        while sched.has_free_slot() {
            match queue.pop_front() {
                Some(j) => {
                    left += 1;
                    sched.admit(j.req, Box::new(j.sink));
                }
                None => break,
            }
        }
        pending.fetch_sub(left, Ordering::Relaxed);
        publish(&sched, queue.len(), &status);
        sched.step();
        publish(&sched, queue.len(), &status);
    }
}

fn publish(sched: &Scheduler, waiting: usize, status: &Mutex<EngineStatus>) {
    if let Ok(mut s) = status.lock() {
        s.stats = sched.stats().clone();
        s.running = sched.active();
        s.waiting = waiting;
        s.snapshots = sched.cache().len();
        s.snapshot_bytes = sched.cache().bytes();
        s.snapshot_logical_bytes = sched.cache().logical_bytes();
    }
}
