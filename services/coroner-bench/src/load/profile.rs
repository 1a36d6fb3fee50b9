//! What the simulated ranks print, and when: the shapes of a real job's output that load one
//! coronerd hardest (issue 22).
//!
//! - `flat`: `--lines` of the training mix at `--rate` (0: all waiting at the start), the
//!   original load and fault run.
//! - `burst`: the start-up burst: every rank prints its ~200 NCCL INFO lines (NCCL_DEBUG=INFO)
//!   at once (3.3 million lines for 16,384 ranks).
//! - `steady`: training: every rank prints one progress line a second.
//! - `failure`: every rank prints a 40-line Python traceback within 2 s (a collective timed out
//!   everywhere at once).
//!
//! Every profile starts all agents' output at one instant, once every agent is connected, so
//! the time the burst takes to be absorbed is measured from that instant.

use super::lines;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    Flat,
    Burst,
    Steady,
    Failure,
}

impl Profile {
    /// Lines each rank prints when `--lines` is not given.
    pub fn default_lines(self) -> u64 {
        match self {
            Profile::Flat => 4000,
            Profile::Burst => 200,
            Profile::Steady => 60,
            Profile::Failure => 40,
        }
    }

    /// Lines per second each rank prints when `--rate` is not given (0: all at once).
    pub fn default_rate(self) -> f64 {
        match self {
            Profile::Flat | Profile::Burst => 0.0,
            Profile::Steady => 1.0,
            // 40 lines within 2 s.
            Profile::Failure => 20.0,
        }
    }

    /// Line `seq` of `rank`.
    pub fn line(self, rank: u32, world: u32, seq: u64) -> Vec<u8> {
        match self {
            Profile::Flat => lines::line(rank, seq),
            Profile::Burst => lines::nccl_init_line(rank, world, seq),
            Profile::Steady => lines::progress_line(rank, seq),
            Profile::Failure => lines::traceback_line(rank, seq),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_prints_lines_of_its_kind() {
        let text = |p: Profile, seq| String::from_utf8(p.line(5, 16_384, seq)).expect("utf-8");
        assert!((0..200).all(|s| text(Profile::Burst, s).contains("NCCL INFO")));
        assert!(text(Profile::Steady, 7).contains("step 7"));
        assert!(text(Profile::Failure, 0).contains("Traceback (most recent call last):"));
        assert!(text(Profile::Failure, 39).contains("Error"), "{}", text(Profile::Failure, 39));
        for p in [Profile::Flat, Profile::Burst, Profile::Steady, Profile::Failure] {
            assert!((0..p.default_lines()).all(|s| (40..240).contains(&p.line(9, 16_384, s).len())), "{p:?} line sizes drift");
        }
        // 40 lines within 2 s, one a second, 200 at once.
        assert_eq!(Profile::Failure.default_lines() as f64 / Profile::Failure.default_rate(), 2.0);
        assert_eq!(Profile::Steady.default_rate(), 1.0);
        assert_eq!((Profile::Burst.default_lines(), Profile::Burst.default_rate()), (200, 0.0));
    }
}
