#![allow(clippy::unwrap_used)]

use std::io::Write;

use super::*;

/// A file of `len` bytes counting up (mod 251), so a misplaced byte shows.
fn file_of(len: usize) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    f.write_all(&bytes).unwrap();
    f
}

fn drained(piped: &mut Piped) -> Vec<u8> {
    let mut out = Vec::new();
    piped.drain_into(&mut out).unwrap();
    out
}

// NB: the tests share the process-wide bounds: each holds this while it runs.
static SERIAL: parking_lot::Mutex<()> = parking_lot::const_mutex(());

#[test]
fn a_set_larger_than_one_pipe_is_spliced_into_several_in_order() {
    let _serial = SERIAL.lock();
    let f = file_of(3 << 20);
    let (pos, len) = (4097u64, (2 << 20) + 12_345);
    let mut piped = Piped::fill(&f, pos, len).unwrap();
    assert!(piped.pipes.len() >= 2, "{} pipes", piped.pipes.len());
    let want: Vec<u8> = (pos as usize..pos as usize + len).map(|i| (i % 251) as u8).collect();
    assert_eq!(drained(&mut piped), want);
    assert!(piped.is_sent());
}

#[test]
fn a_set_past_the_end_of_its_file_is_not_piped() {
    let _serial = SERIAL.lock();
    let f = file_of(100_000);
    assert!(Piped::fill(&f, 90_000, 20_000).is_none(), "the file ends 10,000 bytes early");
}

#[test]
fn only_the_whole_stand_in_is_claimed_and_an_unclaimed_one_gives_its_pipes_back() {
    let _serial = SERIAL.lock();
    let f = file_of(200_000);
    let stand_in = Piped::fill(&f, 0, 150_000).unwrap().into_stand_in().unwrap();
    assert_eq!(stand_in.len(), 150_000);
    assert!(claim(&Bytes::from(vec![1u8; 10])).unwrap().is_none(), "ordinary bytes are no stand-in");
    assert!(claim(&stand_in.slice(10..)).is_err(), "a piece from inside a stand-in");
    assert!(claim(&stand_in.slice(..100)).is_err(), "a stand-in cut short");
    let copy = stand_in.clone();
    let mut piped = claim(&copy).unwrap().unwrap();
    assert!(claim(&stand_in).unwrap().is_none(), "claimed once");
    assert_eq!(drained(&mut piped).len(), 150_000);

    let unclaimed = Piped::fill(&f, 1000, 100_000).unwrap().into_stand_in().unwrap();
    let key = unclaimed.as_ptr() as usize;
    drop(unclaimed);
    assert!(!STAND_INS.lock().contains_key(&key), "dropping the stand-in drops its pipes");
}

#[test]
fn past_the_in_flight_bound_a_read_is_copied() {
    let _serial = SERIAL.lock();
    let f = file_of(1 << 20);
    // Hold the bound's worth in one reservation, as if other responses were in flight.
    let hog = Piped { pipes: Vec::new(), len: IN_FLIGHT_MAX_BYTES, left: 0 };
    IN_FLIGHT.fetch_add(IN_FLIGHT_MAX_BYTES, Ordering::Relaxed);
    assert!(Piped::fill(&f, 0, MIN_PIPED).is_none());
    drop(hog);
    assert!(Piped::fill(&f, 0, MIN_PIPED).is_some());
}

#[test]
fn past_the_pipe_bound_a_read_is_copied() {
    let _serial = SERIAL.lock();
    let f = file_of(1 << 20);
    IDLE.lock().clear(); // no idle pipe to reuse: the read must open one
    // Stand in for the pipes other responses hold.
    PIPES.fetch_add(PIPES_MAX, Ordering::Relaxed);
    let refused = Piped::fill(&f, 0, MIN_PIPED);
    PIPES.fetch_sub(PIPES_MAX, Ordering::Relaxed);
    assert!(refused.is_none(), "no new pipe past the bound");
    drop(refused);
    assert!(Piped::fill(&f, 0, MIN_PIPED).is_some(), "below it, one is opened");
}
