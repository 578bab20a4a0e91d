//! Watching the agent after a restart: the PID must stay the same and alive for
//! `stable_ticks` samples (and the health URL pass); too many PID changes is a crash
//! loop; a dead agent for `stable_ticks` samples, or no verdict by the timeout, fails.
//! `Watch` is the pure decision; `watch` samples the real service.

use std::time::{Duration, Instant};

pub use crate::error::{HealthFailure, Pending};
use crate::service::Service;
use tern_client::Client;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) pid: Option<u32>,
    /// `None` when no health URL is configured.
    pub(crate) url_ok: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Wait,
    Healthy,
    Failed(HealthFailure),
}

#[derive(Clone, Debug)]
pub(crate) struct Watch {
    stable_ticks: u32,
    max_restarts: u32,
    last_pid: Option<u32>,
    stable: u32,
    dead: u32,
    changes: u32,
    url_failures: u32,
}

impl Watch {
    pub(crate) fn new(stable_ticks: u32, max_restarts: u32) -> Self {
        Self {
            stable_ticks: stable_ticks.max(1),
            max_restarts,
            last_pid: None,
            stable: 0,
            dead: 0,
            changes: 0,
            url_failures: 0,
        }
    }

    pub(crate) fn observe(&mut self, s: Sample) -> Verdict {
        let Some(pid) = s.pid else {
            self.stable = 0;
            self.dead += 1;
            if self.dead >= self.stable_ticks {
                return Verdict::Failed(HealthFailure::NotRunning { checks: self.dead });
            }
            return Verdict::Wait;
        };
        if self.dead > 0 && self.last_pid.is_some() {
            // It died and came back: a restart.
            self.changes += 1;
        }
        self.dead = 0;
        match self.last_pid {
            Some(p) if p == pid => self.stable += 1,
            Some(_) => {
                self.changes += 1;
                self.stable = 1;
            }
            None => self.stable = 1,
        }
        self.last_pid = Some(pid);
        if self.changes > self.max_restarts {
            return Verdict::Failed(HealthFailure::CrashLoop {
                restarts: self.changes,
            });
        }
        if s.url_ok == Some(false) {
            self.url_failures += 1;
            return Verdict::Wait;
        }
        if self.stable >= self.stable_ticks {
            Verdict::Healthy
        } else {
            Verdict::Wait
        }
    }

    /// Why it is not healthy yet (for the timeout message).
    pub(crate) fn pending(&self) -> Pending {
        if self.url_failures > 0 {
            Pending::UrlFailing {
                failures: self.url_failures,
            }
        } else {
            Pending::Unstable {
                stable: self.stable,
                needed: self.stable_ticks,
            }
        }
    }
}

/// Samples the service until it is healthy or fails.
pub(crate) fn watch(service: &Service, http: &Client) -> Result<(), HealthFailure> {
    let cfg = &service.cfg;
    let mut w = Watch::new(cfg.stable_ticks, cfg.max_restarts);
    let start = Instant::now();
    // The agent usually writes its PID within milliseconds of its start: look for it more
    // often during the first interval, so that the stability window starts when the
    // agent is up rather than one whole interval later. The verdicts are unchanged: the
    // first sample the watch sees is taken when the PID appears, or after one interval
    // as before.
    let step = (cfg.interval() / 20).clamp(Duration::from_millis(2), cfg.interval());
    while service.main_pid().is_none() && start.elapsed() + step < cfg.interval() {
        std::thread::sleep(step);
    }
    loop {
        let sample = Sample {
            pid: service.main_pid(),
            url_ok: cfg.health_url.as_deref().map(|u| http.probe(u)),
        };
        match w.observe(sample) {
            Verdict::Healthy => return Ok(()),
            Verdict::Failed(why) => return Err(why),
            Verdict::Wait => {}
        }
        if start.elapsed() >= cfg.timeout() {
            return Err(HealthFailure::Timeout {
                timeout: cfg.timeout(),
                pending: w.pending(),
            });
        }
        std::thread::sleep(cfg.interval());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(pid: Option<u32>) -> Sample {
        Sample { pid, url_ok: None }
    }

    fn run(samples: &[Sample]) -> Verdict {
        let mut w = Watch::new(3, 2);
        let mut last = Verdict::Wait;
        for x in samples {
            last = w.observe(*x);
            if last != Verdict::Wait {
                break;
            }
        }
        last
    }

    #[test]
    fn verdicts() {
        let ok = |b| Sample {
            pid: Some(7),
            url_ok: Some(b),
        };
        let cases: Vec<(&str, Vec<Sample>, &str)> = vec![
            ("stable", vec![s(Some(1)); 3], "healthy"),
            (
                "slow start",
                vec![s(None), s(None), s(Some(1)), s(Some(1)), s(Some(1))],
                "healthy",
            ),
            (
                "one reload",
                vec![s(Some(1)), s(Some(2)), s(Some(2)), s(Some(2))],
                "healthy",
            ),
            ("exits at once", vec![s(None); 3], "not running"),
            (
                "dies later",
                vec![s(Some(1)), s(None), s(None), s(None)],
                "not running",
            ),
            (
                "crash loop",
                vec![s(Some(1)), s(Some(2)), s(Some(3)), s(Some(4))],
                "crash loop",
            ),
            (
                "restarts via death",
                vec![
                    s(Some(1)),
                    s(None),
                    s(Some(2)),
                    s(None),
                    s(Some(3)),
                    s(None),
                    s(Some(4)),
                ],
                "crash loop",
            ),
            ("url failing", vec![ok(false); 6], "wait"),
            (
                "url passing",
                vec![ok(false), ok(true), ok(true), ok(true)],
                "healthy",
            ),
        ];
        for (name, samples, want) in cases {
            let got = match run(&samples) {
                Verdict::Healthy => "healthy".to_string(),
                Verdict::Wait => "wait".to_string(),
                Verdict::Failed(why) => why.to_string(),
            };
            assert!(got.contains(want), "{name}: {got}");
        }
    }
}
