//! A request's element counts come from the client: decoding a few bytes that claim billions of
//! elements must fail cleanly, never reserve memory for them (an allocation the allocator cannot
//! satisfy aborts the whole broker, it is not a catchable panic).
//!
//! This binary tracks the most memory held at once, so a pre-sized
//! `Vec::with_capacity(count_from_the_wire)` is caught even when overcommit lets it succeed.

use bytes::Bytes;
use cap::Cap;
use kaas_broker::router::{ROUTES, decode_only};

/// The system allocator, remembering the most memory ever held at once.
#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

/// Count fields that claim far more elements than the body holds: an i32 array count, a
/// compact (unsigned varint) array count, and a record-header-like signed varint.
const HUGE_COUNTS: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0x0f, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xfe, 0xff, 0xff, 0xff, 0x07],
];

/// Bodies with a huge count at every field position a short prefix of zeros can reach (zero
/// decodes as 0, an empty string or an empty array, so the count lands on many fields).
fn hostile_bodies() -> impl Iterator<Item = Bytes> {
    HUGE_COUNTS.iter().flat_map(|count| {
        (0..32).map(move |zeros| {
            let mut body = vec![0u8; zeros];
            body.extend_from_slice(count);
            body.extend_from_slice(&[0; 8]);
            Bytes::from(body)
        })
    })
}

#[test]
fn huge_element_counts_are_refused_without_reserving_memory_for_them() {
    // The test harness itself holds a little; what is checked is that no count from the wire
    // turns into a reservation the body could never fill (those are gigabytes).
    const BOUND: usize = 16 << 20;
    let mut decoded = 0usize;
    for route in ROUTES {
        for version in route.min..=route.max {
            for body in hostile_bodies() {
                let _ = decode_only(route.key, version, body.clone());
                let peak = ALLOCATOR.max_allocated();
                assert!(
                    peak < BOUND,
                    "{:?} v{version} made the process hold {peak} bytes for a {}-byte body {body:02x?}",
                    route.key,
                    body.len()
                );
                decoded += 1;
            }
        }
    }
    assert!(decoded > 1000, "only {decoded} bodies were tried");
}
