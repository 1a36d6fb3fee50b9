//! A rank's own operations in one process group, in the order it issued them (collectives and
//! point-to-point units alike), and the first place where it broke the pattern it had been
//! repeating. Training steps repeat: a rank that sent, then all-reduced, at every step and then
//! all-reduced without sending has diverged from itself, whatever the other ranks did.

/// The longest period looked for, in operations.
const MAX_PERIOD: usize = 64;

/// The index of the first item that breaks the pattern repeated before it, with the pattern's
/// period (so `items[index - period]` is what the pattern put there), or `None` when the rank kept
/// its pattern or never had one. The pattern's period is the one that held longest
/// (the smallest on a tie); the pattern counts once it held for two periods in a row, so a
/// warm-up that differs (DDP's first broadcasts) is not a break.
pub fn deviation(items: &[String]) -> Option<(usize, usize)> {
    let period = (1..=MAX_PERIOD.min(items.len() / 2))
        .map(|p| (longest_run(items, p), p))
        .filter(|(run, p)| *run >= 2 * p)
        .max_by_key(|(run, p)| (*run, usize::MAX - p))?
        .1;
    let mut run = 0;
    for j in period..items.len() {
        if items[j] == items[j - period] {
            run += 1;
        } else if run >= 2 * period {
            return Some((j, period));
        } else {
            run = 0;
        }
    }
    None
}

/// The most items in a row equal to the item `p` before each.
fn longest_run(items: &[String], p: usize) -> usize {
    let (mut best, mut run) = (0, 0);
    for j in p..items.len() {
        run = if items[j] == items[j - p] { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::deviation;

    fn items(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_skipped_operation_breaks_the_pattern_where_it_was_skipped() {
        assert_eq!(deviation(&items("r a r a r a r a r a a r a r a")), Some((10, 2)));
        assert_eq!(deviation(&items("r a r a r a r a r a r512")), Some((10, 2)));
        assert_eq!(deviation(&items("s a s a s a s a s a s a")), None);
    }

    #[test]
    fn a_warm_up_and_short_histories_are_no_break() {
        assert_eq!(deviation(&items("b b b r a r a r a r a")), None);
        assert_eq!(deviation(&items("r a x")), None, "one period is no pattern yet");
        assert_eq!(deviation(&items("")), None);
        // Three operations a step.
        assert_eq!(deviation(&items("x y z x y z x y z x z")), Some((10, 3)));
    }
}
