//! One request frame (everything after the 4-byte size) through the broker's whole request
//! path: header parse, routing, decode and the handler, on an in-memory broker. Any panic,
//! abort or allocation beyond the `-rss_limit_mb`/`-malloc_limit_mb` libFuzzer is given is a
//! finding.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use kaas_broker::connection::handle_frame;
use kaas_broker::router::Pending;
use kaas_broker::sasl::Session;
use kaas_broker::{Broker, BrokerConfig};
use libfuzzer_sys::fuzz_target;
use tokio_util::sync::CancellationToken;

struct World {
    runtime: tokio::runtime::Runtime,
    broker: Arc<Broker>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let broker = Broker::open(BrokerConfig::local_in_memory()).expect("in-memory broker");
        World { runtime, broker }
    })
}

fuzz_target!(|frame: &[u8]| {
    let world = world();
    let peer = SocketAddr::from(([127, 0, 0, 1], 1));
    let session = Arc::new(parking_lot::Mutex::new(Session::new(None)));
    let closed = CancellationToken::new();
    world.runtime.block_on(async {
        if let Ok(Pending::Later(handle)) = handle_frame(&world.broker, Bytes::copy_from_slice(frame), peer, &closed, &session, &Default::default()).await {
            // A long poll or a durability wait: give it a moment, then move on (a panic inside
            // it surfaces as a join error).
            if let Ok(joined) = tokio::time::timeout(Duration::from_millis(20), handle).await {
                assert!(joined.is_ok(), "a deferred handler panicked");
            }
        }
    });
});
