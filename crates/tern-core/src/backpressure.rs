//! Backpressure: inside an active group, an agent may update only when its updater_id,
//! read as a number, falls under the group's progress. Progress grows with the share
//! of updated agents, plus `max_in_flight`, and is always raised far enough to admit
//! the lowest agent not yet updated, so the rollout can never deadlock.

/// An updater_id as a point in [0, 1]. UUIDs are read as their 128-bit value; any
/// other id is hashed (FNV-1a, 128 bits) so that it still gets a stable position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UpdaterNumeral(u128);

impl UpdaterNumeral {
    pub fn of(updater_id: &str) -> Self {
        match hex_value(updater_id) {
            Some(n) => Self(n),
            None => Self(fnv1a_128(updater_id.as_bytes())),
        }
    }

    /// The numeral of an id whose 32 hex digits read `bits` (what [`of`](Self::of) gives
    /// for it), for callers that keep such ids as numbers.
    pub fn from_bits(bits: u128) -> Self {
        Self(bits)
    }

    /// Position in [0, 1].
    pub fn fraction(self) -> f64 {
        self.0 as f64 / u128::MAX as f64
    }

    /// Whether an agent at this position may update under `progress`.
    pub fn admitted(self, progress: f64) -> bool {
        progress >= 1.0 || self.fraction() < progress
    }
}

/// The value of an id that is 32 hex digits once its hyphens are dropped (a leading `+`
/// standing for one of them, as `u128::from_str_radix` reads it). Called for every find
/// and every agent of a report: it does not allocate.
fn hex_value(id: &str) -> Option<u128> {
    let mut n: u128 = 0;
    let mut len = 0;
    for c in id.bytes().filter(|c| *c != b'-') {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b'+' if len == 0 => {
                len = 1;
                continue;
            }
            _ => return None,
        };
        len += 1;
        if len > 32 {
            return None;
        }
        n = (n << 4) | u128::from(v);
    }
    (len == 32).then_some(n)
}

fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

/// Inputs of one progress computation for one active group.
#[derive(Clone, Copy, Debug)]
pub struct ProgressInput {
    pub max_in_flight: f64,
    pub initial: u64,
    pub present: u64,
    pub up_to_date: u64,
    pub lowest_not_updated: Option<UpdaterNumeral>,
    /// The progress written so far; progress never goes back.
    pub previous: f64,
}

/// The new progress, and whether growth was halted because too many of the initial
/// agents dropped off.
pub fn progress(input: ProgressInput) -> (f64, bool) {
    let ProgressInput {
        max_in_flight,
        initial,
        present,
        up_to_date,
        lowest_not_updated,
        previous,
    } = input;
    let previous = previous.clamp(0.0, 1.0);
    if initial == 0 {
        // Nobody was there at the start: there is nothing to protect.
        return (1.0, false);
    }
    let initial_f = initial as f64;
    // Growth stops while more than max_in_flight of the initial agents are missing.
    if (present as f64) < initial_f * (1.0 - max_in_flight) {
        return (previous, true);
    }
    let mut p = max_in_flight + up_to_date as f64 / initial_f;
    if let Some(lowest) = lowest_not_updated {
        let floor = lowest.fraction().next_up();
        if p < floor {
            p = floor;
        }
    }
    (p.clamp(0.0, 1.0).max(previous), false)
}

/// At most this many values of one topology limit's label are reported by a replica
/// and tracked by the leader (fewer for a large `max_in_flight`, see
/// [`tracked_values`]), the first by name: hosts of the others wait until tracked
/// values have no host behind. A flood of invented zones cannot grow the
/// report or the rollout.
pub(crate) const MAX_TOPOLOGY_VALUES: usize = 256;
/// At most this many hosts one topology limit admits at once over all its values: a
/// limit admitting `max_in_flight` per value tracks at most this many divided by it
/// ([`tracked_values`]), so a report and the rollout stay small.
pub(crate) const MAX_TOPOLOGY_ADMITTED: usize = 2048;

/// How many values of a limit admitting `max_in_flight` per value are tracked.
pub fn tracked_values(max_in_flight: u32) -> usize {
    let per = usize::try_from(max_in_flight.max(1)).unwrap_or(usize::MAX);
    (MAX_TOPOLOGY_ADMITTED / per).clamp(1, MAX_TOPOLOGY_VALUES)
}

/// The lowest hosts behind of one label value, by backpressure order.
pub(crate) type Lowest = Vec<(UpdaterNumeral, String)>;

/// Keeps `lowest` the `max` smallest (numeral, id) seen, ascending, without
/// duplicates.
pub(crate) fn keep_lowest(lowest: &mut Lowest, numeral: UpdaterNumeral, id: &str, max: u32) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    if lowest.len() >= max && lowest.last().is_none_or(|(n, _)| numeral >= *n) {
        return;
    }
    let at = lowest.partition_point(|(n, i)| (*n, i.as_str()) < (numeral, id));
    if lowest
        .get(at)
        .is_some_and(|(n, i)| *n == numeral && i == id)
    {
        return;
    }
    lowest.insert(at, (numeral, id.to_string()));
    lowest.truncate(max);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The definition `hex_value` implements without allocating.
    fn reference(id: &str) -> UpdaterNumeral {
        let hex: String = id.chars().filter(|c| *c != '-').collect();
        if hex.len() == 32
            && let Ok(n) = u128::from_str_radix(&hex, 16)
        {
            return UpdaterNumeral(n);
        }
        UpdaterNumeral(fnv1a_128(id.as_bytes()))
    }

    proptest! {
        #[test]
        fn numerals_match_their_definition(
            id in prop_oneof![
                "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
                "[+-]?[0-9a-fA-F-]{28,36}",
                ".{0,40}",
            ]
        ) {
            prop_assert_eq!(UpdaterNumeral::of(&id), reference(&id));
        }
    }

    #[test]
    fn uuids_read_as_numbers() {
        assert_eq!(
            UpdaterNumeral::of("00000000-0000-0000-0000-000000000000").fraction(),
            0.0
        );
        assert_eq!(
            UpdaterNumeral::of("ffffffff-ffff-ffff-ffff-ffffffffffff").fraction(),
            1.0
        );
        let mid = UpdaterNumeral::of("80000000-0000-0000-0000-000000000000").fraction();
        assert!((mid - 0.5).abs() < 1e-9);
        // Non-UUID ids get a stable, spread-out position.
        let a = UpdaterNumeral::of("host-1");
        assert_eq!(a, UpdaterNumeral::of("host-1"));
        assert_ne!(a, UpdaterNumeral::of("host-2"));
    }

    #[test]
    fn progress_formula_and_floor() {
        let base = ProgressInput {
            max_in_flight: 0.1,
            initial: 100,
            present: 100,
            up_to_date: 30,
            lowest_not_updated: None,
            previous: 0.0,
        };
        assert!((progress(base).0 - 0.4).abs() < 1e-12);
        // The lowest not-updated agent sits at 0.9: progress is raised to admit it.
        let lowest = UpdaterNumeral::of("e6666666-6666-6666-6666-666666666666");
        let (p, halted) = progress(ProgressInput {
            lowest_not_updated: Some(lowest),
            ..base
        });
        assert!(!halted);
        assert!(lowest.admitted(p), "p={p} must admit {}", lowest.fraction());
        // Progress never goes back.
        assert_eq!(
            progress(ProgressInput {
                previous: 0.7,
                ..base
            })
            .0,
            0.7
        );
    }

    #[test]
    fn growth_halts_when_too_many_dropped_off() {
        let (p, halted) = progress(ProgressInput {
            max_in_flight: 0.1,
            initial: 100,
            present: 80,
            up_to_date: 50,
            lowest_not_updated: None,
            previous: 0.3,
        });
        assert!(halted);
        assert_eq!(p, 0.3);
    }

    #[test]
    fn the_max_uuid_is_admitted_at_full_progress() {
        let max = UpdaterNumeral::of("ffffffff-ffff-ffff-ffff-ffffffffffff");
        assert!(max.admitted(1.0));
        assert!(!max.admitted(0.99));
    }
}
