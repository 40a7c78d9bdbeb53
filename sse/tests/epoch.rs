//! `Epoch::generate`: 48 random bits, including the first epoch of every process.

use std::collections::HashSet;
use std::process::Command;

use replay_ring_sse::Epoch;

const BITS: u32 = 48;

/// Each of the 48 bits is set in 40–60 % of 4,096 consecutive epochs (a fair bit leaves that band
/// with probability below 10^-30), no epoch has bits above 48, and none repeats.
#[test]
fn every_bit_of_consecutive_epochs_is_spread() {
    let epochs: Vec<u64> = (0..4096).map(|_| Epoch::generate().get()).collect();
    assert!(epochs.iter().all(|&e| e < 1 << BITS));
    assert_eq!(
        epochs.iter().collect::<HashSet<_>>().len(),
        epochs.len(),
        "an epoch repeated"
    );
    for bit in 0..BITS {
        let ones = epochs.iter().filter(|&&e| e >> bit & 1 == 1).count();
        let share = ones as f64 / epochs.len() as f64;
        assert!(
            (0.4..=0.6).contains(&share),
            "bit {bit} set in {share:.3} of epochs"
        );
    }
}

const CHILD: &str = "REPLAY_RING_SSE_PRINT_FIRST_EPOCH";
const CHILD_TEST: &str = "the_first_epoch_of_every_process_is_random_in_all_48_bits";

/// Runs this test binary again, once per sample, each printing the first epoch its process
/// generates; across 24 processes every one of the 48 bits takes both values (a fair bit is
/// constant over 24 samples with probability 2^-23).
#[test]
fn the_first_epoch_of_every_process_is_random_in_all_48_bits() {
    if std::env::var_os(CHILD).is_some() {
        println!("first-epoch={:x}", Epoch::generate().get());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let firsts: Vec<u64> = (0..24)
        .map(|_| {
            let out = Command::new(&exe)
                .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .expect("run the test binary");
            assert!(out.status.success(), "child failed: {out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let hex = stdout
                .lines()
                .find_map(|l| l.split_once("first-epoch=").map(|(_, hex)| hex))
                .unwrap_or_else(|| panic!("no epoch printed: {stdout}"));
            u64::from_str_radix(hex.trim(), 16).unwrap()
        })
        .collect();
    for bit in 0..BITS {
        let ones = firsts.iter().filter(|&&e| e >> bit & 1 == 1).count();
        assert!(
            ones > 0 && ones < firsts.len(),
            "bit {bit} of the first epoch is the same in all {} processes: {firsts:x?}",
            firsts.len()
        );
    }
}
