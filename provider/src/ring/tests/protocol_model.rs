//! Exhaustive check of the doorbell/BUSY protocol over every interleaving.
//!
//! The model is sequentially consistent: that is what the two full fences (the provider's
//! `fence(SeqCst)` between publishing and reading BUSY, the kernel's `smp_mb()` between
//! clearing BUSY and re-reading the producer) buy on real hardware for these four accesses.
//! Two provider threads post twice each; the kernel sleeps until a doorbell, then drains
//! with the documented loop. A final state in which the kernel sleeps with no doorbell
//! pending but WQEs in the ring is a lost doorbell. The documented protocol has none; the
//! tempting shortcuts each have one.

use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The documented protocol.
    Correct,
    /// The kernel clears BUSY and sleeps without re-reading the producer index.
    KernelNoRecheck,
    /// The kernel re-reads the producer index, then clears BUSY (wrong order).
    KernelRecheckBeforeClear,
    /// The provider reads BUSY before publishing its producer index.
    ProviderReadsBusyFirst,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum K {
    Sleep,
    Drain,
    Clear,
    Recheck,
    /// KernelRecheckBeforeClear only: decided to sleep, BUSY still set.
    ClearThenSleep,
}

const THREADS: usize = 2;
const POSTS: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    prod: u8,
    cons: u8,
    busy: bool,
    /// Doorbells rung and not yet seen by the kernel.
    bells: u8,
    /// Per provider thread: posts done, step within the current post, BUSY as read.
    posts: [u8; THREADS],
    step: [u8; THREADS],
    saw_busy: [bool; THREADS],
    k: K,
}

fn provider_step(s: &State, t: usize, v: Variant) -> Option<State> {
    if s.posts[t] == POSTS {
        return None;
    }
    let mut n = s.clone();
    let (publish, read) = if v == Variant::ProviderReadsBusyFirst {
        (1, 0)
    } else {
        (0, 1)
    };
    match s.step[t] {
        x if x == publish => n.prod += 1,
        x if x == read => n.saw_busy[t] = s.busy,
        _ => {
            if !s.saw_busy[t] {
                n.bells += 1;
            }
            n.posts[t] += 1;
            n.step[t] = 0;
            return Some(n);
        }
    }
    n.step[t] += 1;
    Some(n)
}

fn kernel_step(s: &State, v: Variant) -> Option<State> {
    let mut n = s.clone();
    match s.k {
        K::Sleep => {
            if s.bells == 0 {
                return None;
            }
            n.bells = 0;
            n.busy = true;
            n.k = K::Drain;
        }
        K::Drain => {
            if s.cons != s.prod {
                n.cons += 1;
            } else {
                n.k = if v == Variant::KernelRecheckBeforeClear {
                    K::Recheck
                } else {
                    K::Clear
                };
            }
        }
        K::Clear => {
            n.busy = false;
            n.k = if v == Variant::KernelNoRecheck {
                K::Sleep
            } else {
                K::Recheck
            };
        }
        K::Recheck => {
            if s.prod != s.cons {
                n.busy = true;
                n.k = K::Drain;
            } else if v == Variant::KernelRecheckBeforeClear {
                n.k = K::ClearThenSleep;
            } else {
                n.k = K::Sleep;
            }
        }
        K::ClearThenSleep => {
            n.busy = false;
            n.k = K::Sleep;
        }
    }
    Some(n)
}

/// Explores every interleaving; returns the number of states and the final states that lost
/// WQEs.
fn explore(v: Variant) -> (usize, Vec<State>) {
    let init = State {
        prod: 0,
        cons: 0,
        busy: false,
        bells: 0,
        posts: [0; THREADS],
        step: [0; THREADS],
        saw_busy: [false; THREADS],
        k: K::Sleep,
    };
    let mut seen = HashSet::new();
    let mut stack = vec![init];
    let mut lost = Vec::new();
    while let Some(s) = stack.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        let mut next: Vec<State> = (0..THREADS)
            .filter_map(|t| provider_step(&s, t, v))
            .collect();
        next.extend(kernel_step(&s, v));
        if next.is_empty() {
            // Final: every post done, the kernel asleep with no doorbell pending.
            assert_eq!(s.k, K::Sleep);
            if s.prod != s.cons {
                lost.push(s);
            }
        }
        stack.extend(next);
    }
    (seen.len(), lost)
}

#[test]
fn documented_protocol_never_loses_a_doorbell() {
    let (states, lost) = explore(Variant::Correct);
    assert!(states > 500, "explored only {states} states");
    assert!(lost.is_empty(), "lost doorbell in {:?}", lost.first());
}

#[test]
fn each_shortcut_loses_a_doorbell() {
    for v in [
        Variant::KernelNoRecheck,
        Variant::KernelRecheckBeforeClear,
        Variant::ProviderReadsBusyFirst,
    ] {
        let (_, lost) = explore(v);
        assert!(
            !lost.is_empty(),
            "{v:?} should lose a doorbell in some interleaving"
        );
    }
}
