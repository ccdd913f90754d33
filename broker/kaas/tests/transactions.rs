//! Transactions end to end with librdkafka: commit and abort visibility under read_committed
//! and read_uncommitted, offsets sent to a transaction, zombie fencing, a crash with a
//! transaction open, and the transaction timeout.

mod common;

use std::time::{Duration, Instant};

use common::{Kaas, TestResult, payload, series};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const T: Duration = Duration::from_secs(30);

fn txn_producer(kaas: &Kaas, id: &str, extra: &[(&str, &str)]) -> TestResult<BaseProducer> {
    let mut c = kaas.config();
    c.set("transactional.id", id)
        .set("message.timeout.ms", "30000");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    let p: BaseProducer = c.create()?;
    p.init_transactions(T)?;
    Ok(p)
}

fn send(p: &BaseProducer, topic: &str, values: &[&str]) -> TestResult {
    for v in values {
        p.send(BaseRecord::<(), str>::to(topic).partition(0).payload(v))
            .map_err(|(e, _)| e)?;
    }
    p.flush(T)?;
    Ok(())
}

/// Reads partition 0 of `topic` from the beginning at `isolation` until `count` messages have
/// arrived, then keeps polling for `settle` to catch anything extra.
fn read(
    kaas: &Kaas,
    topic: &str,
    isolation: &str,
    count: usize,
    settle: Duration,
) -> TestResult<Vec<String>> {
    let consumer: BaseConsumer = kaas
        .config()
        .set("group.id", "readers")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let mut out = Vec::new();
    let deadline = Instant::now() + T;
    let mut settle_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if settle_until.is_some_and(|s| now > s) || now > deadline {
            break;
        }
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m: OwnedMessage = m?.detach();
            out.push(String::from_utf8(payload(&m))?);
        }
        if out.len() >= count && settle_until.is_none() {
            settle_until = Some(Instant::now() + settle);
        }
    }
    Ok(out)
}

/// One record from a non-transactional producer.
fn produce_plain(kaas: &Kaas, topic: &str, value: &str) -> TestResult {
    let plain: BaseProducer = kaas.config().create()?;
    send(&plain, topic, &[value])
}

fn fenced(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::Fenced | C::ProducerFenced | C::InvalidProducerEpoch)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_records_are_visible_and_aborted_ones_are_not() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("txn", 1, &[]).await?;
    let p = txn_producer(&kaas, "visibility", &[])?;
    p.begin_transaction()?;
    send(&p, "txn", &["c1", "c2", "c3"])?;
    p.commit_transaction(T)?;
    p.begin_transaction()?;
    send(&p, "txn", &["a1", "a2"])?;
    p.abort_transaction(T)?;
    p.begin_transaction()?;
    send(&p, "txn", &["c4"])?;
    p.commit_transaction(T)?;

    let committed = read(&kaas, "txn", "read_committed", 4, Duration::from_secs(1))?;
    assert_eq!(committed, vec!["c1", "c2", "c3", "c4"]);
    let uncommitted = read(&kaas, "txn", "read_uncommitted", 6, Duration::from_secs(1))?;
    assert_eq!(uncommitted, vec!["c1", "c2", "c3", "a1", "a2", "c4"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_holds_back_read_committed_consumers() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("open", 1, &[]).await?;
    let p = txn_producer(&kaas, "open", &[])?;
    p.begin_transaction()?;
    send(&p, "open", &["pending"])?;
    produce_plain(&kaas, "open", "after")?;
    assert_eq!(
        read(
            &kaas,
            "open",
            "read_committed",
            1,
            Duration::from_millis(1500)
        )?,
        Vec::<String>::new(),
        "nothing is stable yet"
    );
    assert_eq!(
        read(
            &kaas,
            "open",
            "read_uncommitted",
            2,
            Duration::from_millis(200)
        )?,
        vec!["pending", "after"]
    );
    p.commit_transaction(T)?;
    assert_eq!(
        read(
            &kaas,
            "open",
            "read_committed",
            2,
            Duration::from_millis(500)
        )?,
        vec!["pending", "after"]
    );
    Ok(())
}

/// With zero copy on, a read_committed fetch that stops at an open transaction returns far fewer
/// bytes than it looked at: the few committed records before the transaction must still arrive
/// byte for byte (a set that short is copied, not handed over in pipes: the response encoder
/// copies short record sets, and a copied stand-in would reach the consumer as zeros), and the
/// transaction's large records, once committed, are spliced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_records_before_an_open_transaction_arrive_whole_with_zero_copy() -> TestResult {
    let kaas = Kaas::start_with(&["--fetch-zero-copy", "true"])?;
    kaas.create_topic("below", 1, &[]).await?;
    let record = |i: usize, len: usize| format!("{i}:{}", char::from(b'a' + i as u8).to_string().repeat(len));
    let committed: Vec<String> = (0..3).map(|i| record(i, 3_000)).collect();
    let pending: Vec<String> = (3..5).map(|i| record(i, 60_000)).collect();
    let plain: BaseProducer = kaas.config().create()?;
    send(&plain, "below", &committed.iter().map(String::as_str).collect::<Vec<_>>())?;
    let p = txn_producer(&kaas, "below", &[])?;
    p.begin_transaction()?;
    send(&p, "below", &pending.iter().map(String::as_str).collect::<Vec<_>>())?;
    let stable = read(&kaas, "below", "read_committed", committed.len(), Duration::from_millis(500))?;
    assert!(stable == committed, "read_committed below the open transaction: {:?}", stable.iter().map(|r| r.len()).collect::<Vec<_>>());
    p.commit_transaction(T)?;
    let all = read(&kaas, "below", "read_committed", committed.len() + pending.len(), Duration::from_millis(500))?;
    assert!(all == [committed, pending].concat(), "read_committed after the commit: {:?}", all.iter().map(|r| r.len()).collect::<Vec<_>>());
    let spliced = series(&kaas.metrics()?, "kaas_fetch_spliced_bytes_total", &[]).ok_or("no kaas_fetch_spliced_bytes_total")?;
    assert!(spliced >= 120_000.0, "the committed transaction's records were spliced: {spliced} bytes");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_sent_to_a_transaction_are_committed_only_with_it() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("in", 1, &[]).await?;
    kaas.create_topic("out", 1, &[]).await?;
    let group_consumer = |isolation: &str| -> TestResult<BaseConsumer> {
        let mut c = kaas.config();
        c.set("group.id", "eos")
            .set("enable.auto.commit", "false")
            .set("isolation.level", isolation);
        Ok(c.create()?)
    };
    // read_uncommitted: OffsetFetch without require_stable sees the last committed offset;
    // read_committed: with require_stable, a pending offset is UNSTABLE_OFFSET_COMMIT.
    let consumer = group_consumer("read_uncommitted")?;
    let stable = group_consumer("read_committed")?;
    let cgm = consumer.group_metadata().ok_or("no group metadata")?;
    let fetch = |c: &BaseConsumer, timeout: Duration| -> TestResult<Offset> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("in", 0);
        let got = c.committed_offsets(tpl, timeout)?;
        Ok(got
            .find_partition("in", 0)
            .ok_or("partition missing")?
            .offset())
    };
    let committed = || fetch(&consumer, T);
    let offsets = |o: i64| -> TestResult<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("in", 0, Offset::Offset(o))?;
        Ok(tpl)
    };
    let p = txn_producer(&kaas, "eos-pipeline", &[])?;
    p.begin_transaction()?;
    send(&p, "out", &["x"])?;
    p.send_offsets_to_transaction(&offsets(5)?, &cgm, T)?;
    assert_eq!(
        committed()?,
        Offset::Invalid,
        "pending until the transaction commits"
    );
    assert!(
        fetch(&stable, Duration::from_secs(2)).is_err(),
        "a read_committed consumer waits for the outcome"
    );
    p.commit_transaction(T)?;
    assert_eq!(committed()?, Offset::Offset(5));
    assert_eq!(fetch(&stable, T)?, Offset::Offset(5));

    p.begin_transaction()?;
    send(&p, "out", &["y"])?;
    p.send_offsets_to_transaction(&offsets(9)?, &cgm, T)?;
    p.abort_transaction(T)?;
    assert_eq!(
        committed()?,
        Offset::Offset(5),
        "an aborted transaction commits nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_with_the_same_id_fences_the_first() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("zombie", 1, &[]).await?;
    let first = txn_producer(&kaas, "fenced-id", &[])?;
    first.begin_transaction()?;
    send(&first, "zombie", &["zombie"])?;
    // The new instance aborts the open transaction and bumps the epoch.
    let second = txn_producer(&kaas, "fenced-id", &[])?;
    let err = first
        .commit_transaction(T)
        .err()
        .ok_or("the fenced producer committed")?;
    assert!(fenced(&err), "{err:?}");
    second.begin_transaction()?;
    send(&second, "zombie", &["live"])?;
    second.commit_transaction(T)?;
    assert_eq!(
        read(&kaas, "zombie", "read_committed", 1, Duration::from_secs(1))?,
        vec!["live"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_open_at_a_crash_is_aborted_after_restart() -> TestResult {
    let mut kaas = Kaas::start()?;
    kaas.create_topic("crash", 1, &[]).await?;
    let p = txn_producer(
        &kaas,
        "crashing",
        &[
            ("transaction.timeout.ms", "3000"),
            ("message.timeout.ms", "3000"),
        ],
    )?;
    p.begin_transaction()?;
    send(&p, "crash", &["lost"])?;
    drop(p);
    kaas.kill9()?;
    kaas.restart()?;
    produce_plain(&kaas, "crash", "later")?;
    // The transaction times out on the restarted coordinator, its abort marker unblocks the
    // last stable offset, and read_committed consumers move on.
    assert_eq!(
        read(
            &kaas,
            "crash",
            "read_committed",
            1,
            Duration::from_millis(500)
        )?,
        vec!["later"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_transaction_is_aborted_and_its_producer_fenced() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("slow", 1, &[]).await?;
    let p = txn_producer(
        &kaas,
        "slow",
        &[
            ("transaction.timeout.ms", "2000"),
            ("message.timeout.ms", "2000"),
        ],
    )?;
    p.begin_transaction()?;
    send(&p, "slow", &["expired"])?;
    produce_plain(&kaas, "slow", "after")?;
    assert_eq!(
        read(
            &kaas,
            "slow",
            "read_committed",
            1,
            Duration::from_millis(500)
        )?,
        vec!["after"]
    );
    assert!(
        p.commit_transaction(T).is_err(),
        "the coordinator aborted the transaction"
    );
    Ok(())
}

mod wire_level {
    //! Bad input and the admin APIs, spoken directly on the wire.

    use bytes::Bytes;
    use kafka_protocol::ResponseError as E;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, DescribeProducersRequest, DescribeTransactionsRequest,
        EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ListTransactionsRequest,
        ProduceRequest, ProducerId, TopicName, TransactionalId,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::common::wire::{Wire, txn_batch};
    use super::common::{Kaas, TestResult};

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_owned())
    }

    fn produce(
        wire: &mut Wire,
        txn: Option<&str>,
        partition: i32,
        records: Bytes,
    ) -> TestResult<i16> {
        produce_at(wire, 9, txn, partition, records)
    }

    fn produce_at(
        wire: &mut Wire,
        version: i16,
        txn: Option<&str>,
        partition: i32,
        records: Bytes,
    ) -> TestResult<i16> {
        let request = ProduceRequest::default()
            .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(s("w")))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(records)),
                    ]),
            ]);
        let response = wire.call(version, &request)?;
        Ok(response.responses[0].partition_responses[0].error_code)
    }

    fn add_partition(
        wire: &mut Wire,
        txn: &str,
        pid: i64,
        epoch: i16,
        partition: i32,
    ) -> TestResult<i16> {
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(txn)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s("w")))
                    .with_partitions(vec![partition]),
            ]);
        let response = wire.call(3, &request)?;
        Ok(response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    }

    #[test]
    fn bad_transactional_input_gets_kafka_errors() -> TestResult {
        let kaas = Kaas::start()?;
        let mut wire = Wire::connect(&kaas.bootstrap)?;
        wire.create_topic("w", 2)?;
        let found = wire.call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("w-txn"))
                .with_key_type(1),
        )?;
        assert_eq!(
            (found.error_code, found.port),
            (0, i32::from(kaas.port())),
            "this broker coordinates"
        );
        let init = wire.call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("w-txn"))))
                .with_transaction_timeout_ms(60_000),
        )?;
        assert_eq!(init.error_code, 0);
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        let timeout = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s("w-txn"))))
            .with_transaction_timeout_ms(0);
        assert_eq!(
            wire.call(4, &timeout)?.error_code,
            E::InvalidTransactionTimeout.code()
        );

        assert_eq!(
            add_partition(&mut wire, "nobody", pid, epoch, 0)?,
            E::InvalidProducerIdMapping.code()
        );
        assert_eq!(
            add_partition(&mut wire, "w-txn", pid, epoch - 1, 0)?,
            E::ProducerFenced.code()
        );
        assert_eq!(add_partition(&mut wire, "w-txn", pid, epoch, 0)?, 0);
        // Transactional records without a transactional id, and for a partition outside the
        // transaction, are refused; nothing is written.
        assert_eq!(
            produce(&mut wire, None, 0, txn_batch(pid, epoch, 0, &["v"])?)?,
            E::TransactionalIdAuthorizationFailed.code()
        );
        assert_eq!(
            produce(
                &mut wire,
                Some("w-txn"),
                1,
                txn_batch(pid, epoch, 0, &["v"])?
            )?,
            E::InvalidTxnState.code()
        );
        assert_eq!(
            produce(
                &mut wire,
                Some("w-txn"),
                0,
                txn_batch(pid, epoch - 1, 0, &["v"])?
            )?,
            E::InvalidProducerEpoch.code()
        );
        assert_eq!(
            produce(
                &mut wire,
                Some("w-txn"),
                0,
                txn_batch(pid, epoch, 0, &["v"])?
            )?,
            0
        );

        // The admin view of the open transaction.
        let listed = wire.call(
            1,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing")])
                .with_duration_filter(-1),
        )?;
        let ids: Vec<String> = listed
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.to_string())
            .collect();
        assert_eq!(ids, vec!["w-txn"]);
        let described = wire.call(
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s("w-txn"))]),
        )?;
        let t = &described.transaction_states[0];
        assert_eq!(
            (t.error_code, t.transaction_state.as_str(), t.producer_id.0),
            (0, "Ongoing", pid)
        );
        assert_eq!(t.topics[0].partitions, vec![0]);
        let producers = wire.call(
            0,
            &DescribeProducersRequest::default().with_topics(vec![
                TopicRequest::default()
                    .with_name(TopicName(s("w")))
                    .with_partition_indexes(vec![0]),
            ]),
        )?;
        let active = &producers.topics[0].partitions[0].active_producers;
        assert_eq!(
            active
                .iter()
                .map(|p| (p.producer_id.0, p.current_txn_start_offset))
                .collect::<Vec<_>>(),
            vec![(pid, 0)]
        );

        // EndTxn from a fenced epoch changes nothing; the real one commits.
        let end = |epoch: i16| {
            EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s("w-txn")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true)
        };
        assert_eq!(
            wire.call(3, &end(epoch - 1))?.error_code,
            E::ProducerFenced.code()
        );
        assert_eq!(wire.call(3, &end(epoch))?.error_code, 0);
        assert_eq!(
            wire.call(3, &end(epoch))?.error_code,
            0,
            "a retried commit succeeds"
        );
        let described = wire.call(
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(vec![
                TransactionalId(s("w-txn")),
                TransactionalId(s("unknown")),
            ]),
        )?;
        assert_eq!(
            described.transaction_states[0].transaction_state.as_str(),
            "CompleteCommit"
        );
        assert_eq!(
            described.transaction_states[1].error_code,
            E::TransactionalIdNotFound.code()
        );
        Ok(())
    }

    /// Transactions v2 (KIP-890 part 2) as a Kafka 4 producer speaks it: Produce v12 adds its
    /// partition (no AddPartitionsToTxn), TxnOffsetCommit v5 its group (no AddOffsetsToTxn),
    /// and every EndTxn v5 bumps the epoch — the markers carry the new one, so a late write of
    /// the ended transaction is fenced; a retried EndTxn names the old epoch and succeeds; an
    /// abort with nothing in the transaction is allowed.
    #[test]
    fn transactions_v2_add_by_writing_and_bump_the_epoch_at_each_end() -> TestResult {
        use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
        use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
        use kafka_protocol::messages::txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic};
        use kafka_protocol::messages::{GroupId, ListOffsetsRequest, OffsetFetchRequest, TxnOffsetCommitRequest};

        let kaas = Kaas::start()?;
        let mut wire = Wire::connect(&kaas.bootstrap)?;
        wire.create_topic("w", 2)?;
        let init = wire.call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("v2"))))
                .with_transaction_timeout_ms(60_000),
        )?;
        assert_eq!(init.error_code, 0);
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        let end = |wire: &mut Wire, epoch: i16, commit: bool| -> TestResult<(i16, i64, i16)> {
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s("v2")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit);
            let response = wire.call(5, &request)?;
            Ok((response.error_code, response.producer_id.0, response.producer_epoch))
        };
        let stable_end = |wire: &mut Wire, partition: i32| -> TestResult<i64> {
            let request = ListOffsetsRequest::default().with_replica_id((-1).into()).with_isolation_level(1).with_topics(vec![
                ListOffsetsTopic::default().with_name(TopicName(s("w"))).with_partitions(vec![
                    ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1),
                ]),
            ]);
            Ok(wire.call(5, &request)?.topics[0].partitions[0].offset)
        };

        // The write adds its partition; a v11 write to another partition is still verified.
        assert_eq!(produce_at(&mut wire, 12, Some("v2"), 0, txn_batch(pid, epoch, 0, &["a"])?)?, 0);
        assert_eq!(
            produce_at(&mut wire, 11, Some("v2"), 1, txn_batch(pid, epoch, 0, &["x"])?)?,
            E::InvalidTxnState.code(),
            "Produce v11 adds nothing"
        );
        let described = wire.call(0, &DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s("v2"))]))?;
        let t = &described.transaction_states[0];
        assert_eq!((t.transaction_state.as_str(), t.topics[0].partitions.clone()), ("Ongoing", vec![0]));
        assert_eq!(stable_end(&mut wire, 0)?, 0, "open: nothing stable yet");

        // The commit answers the bumped epoch; a retry (old epoch) gets the same answer.
        assert_eq!(end(&mut wire, epoch, true)?, (0, pid, epoch + 1));
        assert_eq!(end(&mut wire, epoch, true)?, (0, pid, epoch + 1), "a retried commit succeeds");
        assert_eq!(end(&mut wire, epoch, false)?.0, E::InvalidTxnState.code(), "not the outcome it retries");
        assert_eq!(stable_end(&mut wire, 0)?, 2, "the record and its marker");
        let producers = wire.call(
            0,
            &DescribeProducersRequest::default().with_topics(vec![
                TopicRequest::default().with_name(TopicName(s("w"))).with_partition_indexes(vec![0]),
            ]),
        )?;
        let active = &producers.topics[0].partitions[0].active_producers;
        assert_eq!(
            active.iter().map(|p| (p.producer_id.0, p.producer_epoch)).collect::<Vec<_>>(),
            vec![(pid, i32::from(epoch) + 1)],
            "the marker carries the bumped epoch"
        );
        // A late write of the ended transaction is fenced, in the partition and at the
        // coordinator alike.
        assert_eq!(produce_at(&mut wire, 12, Some("v2"), 0, txn_batch(pid, epoch, 1, &["late"])?)?, E::InvalidProducerEpoch.code());
        assert_eq!(produce_at(&mut wire, 12, Some("v2"), 1, txn_batch(pid, epoch, 0, &["late"])?)?, E::InvalidProducerEpoch.code());

        // The next transaction, at the new epoch from sequence 0, with a group's offsets added
        // by TxnOffsetCommit v5 itself; aborted.
        let epoch = epoch + 1;
        assert_eq!(produce_at(&mut wire, 12, Some("v2"), 1, txn_batch(pid, epoch, 0, &["b"])?)?, 0);
        let commit_offset = |wire: &mut Wire, epoch: i16, offset: i64| -> TestResult<i16> {
            let request = TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s("v2")))
                .with_group_id(GroupId(s("v2-group")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(TopicName(s("w"))).with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default().with_partition_index(0).with_committed_offset(offset),
                ])]);
            Ok(wire.call(5, &request)?.topics[0].partitions[0].error_code)
        };
        assert_eq!(commit_offset(&mut wire, epoch, 7)?, 0);
        assert_eq!(end(&mut wire, epoch, false)?, (0, pid, epoch + 1));
        let committed = |wire: &mut Wire| -> TestResult<i64> {
            let request = OffsetFetchRequest::default().with_require_stable(true).with_groups(vec![
                OffsetFetchRequestGroup::default().with_group_id(GroupId(s("v2-group"))).with_topics(Some(vec![
                    OffsetFetchRequestTopics::default().with_name(TopicName(s("w"))).with_partition_indexes(vec![0]),
                ])),
            ]);
            Ok(wire.call(8, &request)?.groups[0].topics[0].partitions[0].committed_offset)
        };
        assert_eq!(committed(&mut wire)?, -1, "aborted with its transaction");
        assert_eq!(stable_end(&mut wire, 1)?, 2, "the aborted record and its marker");

        // An abort with nothing in the transaction bumps the epoch too; a commit of nothing is
        // refused.
        let epoch = epoch + 1;
        assert_eq!(end(&mut wire, epoch, false)?, (0, pid, epoch + 1));
        let epoch = epoch + 1;
        assert_eq!(end(&mut wire, epoch, true)?.0, E::InvalidTxnState.code());
        assert_eq!(end(&mut wire, epoch - 2, false)?.0, E::ProducerFenced.code(), "an epoch two ends old is fenced");

        // Offsets committed by a transaction that commits.
        assert_eq!(commit_offset(&mut wire, epoch, 9)?, 0);
        assert_eq!(end(&mut wire, epoch, true)?, (0, pid, epoch + 1));
        assert_eq!(committed(&mut wire)?, 9);
        Ok(())
    }
}
