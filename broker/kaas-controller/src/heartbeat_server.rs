//! The controller side of the heartbeat: one bidirectional stream per broker.
//!
//! Every broker runs this server; only the current controller accepts streams (others answer
//! FAILED_PRECONDITION, so a broker that dialled a stale address finds out at once). The open
//! streams are the alive set; a stream ends when its broker goes away or this broker loses the
//! Lease, which makes the brokers look for the new controller.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info};

use crate::proto::heartbeat_server::{Heartbeat, HeartbeatServer};
use crate::proto::{Ack, AssignmentChanged, BrokerBeat, ControllerMessage, controller_message};

/// Whether this broker is the controller, and at which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    Controller { epoch: i64 },
}

/// What the controller knows of one broker from its beats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSession {
    pub incarnation: String,
    pub draining: bool,
    pub last_beat: Instant,
    pub partitions_led: usize,
    pub assignment_version: i64,
}

/// State shared by the heartbeat server and the controller loop.
#[derive(Debug)]
pub struct HeartbeatHub {
    role: watch::Sender<Role>,
    sessions: Mutex<BTreeMap<i32, BrokerSession>>,
    pushes: broadcast::Sender<AssignmentChanged>,
}

impl Default for HeartbeatHub {
    fn default() -> Self {
        HeartbeatHub { role: watch::Sender::new(Role::Follower), sessions: Mutex::new(BTreeMap::new()), pushes: broadcast::channel(16).0 }
    }
}

impl HeartbeatHub {
    pub fn new() -> Arc<HeartbeatHub> {
        Arc::new(HeartbeatHub::default())
    }

    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    pub fn set_role(&self, role: Role) {
        self.role.send_if_modified(|r| {
            let changed = *r != role;
            *r = role;
            changed
        });
        if role == Role::Follower {
            self.sessions.lock().clear();
        }
    }

    /// Brokers whose last beat is younger than `session_timeout`, with what they said.
    pub fn alive(&self, session_timeout: Duration) -> BTreeMap<i32, BrokerSession> {
        self.sessions.lock().iter().filter(|(_, s)| s.last_beat.elapsed() < session_timeout).map(|(id, s)| (*id, s.clone())).collect()
    }

    /// Tells every connected broker that a new assignment.json is on the volume.
    pub fn push_assignment_changed(&self, controller_epoch: i64, assignment_version: i64) {
        let _ = self.pushes.send(AssignmentChanged { controller_epoch, assignment_version });
    }

    fn record(&self, beat: &BrokerBeat) {
        let session = BrokerSession {
            incarnation: beat.incarnation.clone(),
            draining: beat.draining,
            last_beat: Instant::now(),
            partitions_led: beat.partitions_led.len(),
            assignment_version: beat.assignment_version,
        };
        let previous = self.sessions.lock().insert(beat.broker_id, session);
        match previous {
            None => info!(broker = beat.broker_id, incarnation = %beat.incarnation, "broker joined"),
            Some(p) if p.incarnation != beat.incarnation => {
                info!(broker = beat.broker_id, incarnation = %beat.incarnation, "broker restarted")
            }
            Some(p) if !p.draining && beat.draining => info!(broker = beat.broker_id, "broker is draining"),
            _ => {}
        }
    }

    /// The tonic service over this hub.
    pub fn service(self: &Arc<Self>) -> HeartbeatServer<HeartbeatService> {
        HeartbeatServer::new(HeartbeatService { hub: self.clone() })
    }
}

/// The gRPC service.
#[derive(Debug)]
pub struct HeartbeatService {
    hub: Arc<HeartbeatHub>,
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ControllerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Heartbeat for HeartbeatService {
    type StreamStream = Outbound;

    async fn stream(&self, request: Request<Streaming<BrokerBeat>>) -> Result<Response<Outbound>, Status> {
        let Role::Controller { epoch } = self.hub.role() else {
            return Err(Status::failed_precondition("this broker is not the controller"));
        };
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let hub = self.hub.clone();
        let mut pushes = hub.pushes.subscribe();
        let mut role = hub.role.subscribe();
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    beat = inbound.message() => match beat {
                        Ok(Some(beat)) => {
                            hub.record(&beat);
                            controller_message::Kind::Ack(Ack { seq: beat.seq, controller_epoch: epoch })
                        }
                        Ok(None) | Err(_) => break,
                    },
                    push = pushes.recv() => match push {
                        Ok(changed) => controller_message::Kind::AssignmentChanged(changed),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    // Losing the Lease ends every stream: brokers go looking for the new controller.
                    _ = role.wait_for(|r| *r != Role::Controller { epoch }) => break,
                };
                if tx.send(Ok(ControllerMessage { kind: Some(message) })).await.is_err() {
                    break;
                }
            }
            debug!("heartbeat stream closed");
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
