//! A minimal blocking Kafka wire client for tests that need exact bytes: hand-picked versions,
//! duplicate batches, malformed frames.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use super::TestResult;

pub struct Wire {
    stream: TcpStream,
    correlation: i32,
    client_id: StrBytes,
}

impl Wire {
    pub fn connect(addr: &str) -> TestResult<Wire> {
        Wire::connect_as(addr, "kaas-wire-test")
    }

    /// A connection whose requests carry `client_id`.
    pub fn connect_as(addr: &str, client_id: &str) -> TestResult<Wire> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        Ok(Wire { stream, correlation: 0, client_id: StrBytes::from_string(client_id.into()) })
    }

    /// Sends a typed request and decodes its typed response.
    pub fn call<R: Request>(&mut self, version: i16, request: &R) -> TestResult<R::Response> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| "unknown key")?;
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(self.client_id.clone()));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version))?;
        request.encode(&mut body, version)?;
        self.send_frame(&body)?;
        let frame = self.read_frame()?.ok_or("connection closed instead of a response")?;
        let mut frame = Bytes::from(frame);
        let response_header = ResponseHeader::decode(&mut frame, key.response_header_version(version))?;
        if response_header.correlation_id != self.correlation {
            return Err(format!("correlation id {} != {}", response_header.correlation_id, self.correlation).into());
        }
        let response = R::Response::decode(&mut frame, version)?;
        Ok(response)
    }

    /// Creates a topic through CreateTopics v5 and checks it worked.
    pub fn create_topic(&mut self, topic: &str, partitions: i32) -> TestResult {
        let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
        let response = self.call(5, &request)?;
        let result = &response.topics[0];
        if result.error_code != 0 {
            return Err(format!("creating {topic}: error {} {:?}", result.error_code, result.error_message).into());
        }
        Ok(())
    }

    pub fn send_frame(&mut self, body: &[u8]) -> TestResult {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        self.send_raw(&out)
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> TestResult {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// One response frame; `None` when the broker closed the connection.
    pub fn read_frame(&mut self) -> TestResult<Option<Vec<u8>>> {
        let mut size = [0u8; 4];
        match self.stream.read_exact(&mut size) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body)?;
        Ok(Some(body))
    }

    /// Whether the broker closed this connection (EOF or reset) within the read timeout.
    pub fn closed_by_broker(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf), Ok(0)) || matches!(self.stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    }
}

/// One v2 record batch of `values`, idempotent when `producer_id >= 0`.
pub fn batch(producer_id: i64, producer_epoch: i16, base_sequence: i32, values: &[&str]) -> TestResult<Bytes> {
    encode_batch(false, producer_id, producer_epoch, base_sequence, values)
}

/// One transactional v2 record batch of `values`.
pub fn txn_batch(producer_id: i64, producer_epoch: i16, base_sequence: i32, values: &[&str]) -> TestResult<Bytes> {
    encode_batch(true, producer_id, producer_epoch, base_sequence, values)
}

fn encode_batch(transactional: bool, producer_id: i64, producer_epoch: i16, base_sequence: i32, values: &[&str]) -> TestResult<Bytes> {
    // Now, not a fixed date: the broker expires producers idle longer than
    // transactional.id.expiration.ms, judged by their batches' timestamps.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // NB: -1, 0, 1, ... for a batch without a producer (base sequence -1): the
            // encoder starts a new batch wherever offset minus sequence changes, and a produce
            // request may hold one batch per partition.
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: now,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None })?;
    Ok(buf.freeze())
}
