// The KafkaJS part of the kaas conformance suite: the scenarios of the other client programs
// that KafkaJS supports. Its producer is not idempotent by default, so the produce scenario sets
// idempotent: true (acks=all, one request in flight). KafkaJS consumers always belong to a group
// (there is no assign), so it has no "consume assign" scenario, and its read_committed check
// in "transactions" reads through a group of its own.
//
// With CONFORMANCE_JS_CLIENT=confluent-kafka-javascript the same scenarios run on librdkafka's
// Node.js binding through its KafkaJS-compatible API, which takes the KafkaJS settings under
// `kafkaJS` (acks, fromBeginning and autoCommit in the producer's and consumer's settings, not
// per call) and has no describeCluster, createPartitions or describeConfigs in its admin client.
// Prints
//
//   VERSION <tab> X.Y.Z
//   RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
//
// Usage: node conformance.js BOOTSTRAP [scenario ...]   (the client from NODE_PATH, see conformance.py)
'use strict'

const crypto = require('crypto')
const CONFLUENT = process.env.CONFORMANCE_JS_CLIENT === 'confluent-kafka-javascript'
const { Kafka, logLevel } = CONFLUENT ? require('@confluentinc/kafka-javascript').KafkaJS : require('kafkajs')
const version = CONFLUENT
  ? `${require('@confluentinc/kafka-javascript/package.json').version} (librdkafka ${require('@confluentinc/kafka-javascript').librdkafkaVersion})`
  : require('kafkajs/package.json').version
const NAME = CONFLUENT ? 'ckjs' : 'kafkajs'

// The client's settings: KafkaJS takes them as they are, the compatible API under `kafkaJS`.
const settings = s => CONFLUENT ? { kafkaJS: s } : s

const WAIT_MS = 15000 // every step is bounded, so a missing feature fails in seconds
const RECORDS = 200
const RUN = crypto.randomBytes(4).toString('hex')

let kafka

class Failed extends Error {}

function check (ok, what) {
  if (!ok) throw new Failed(what)
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// UNKNOWN_TOPIC_OR_PARTITION (error code 3) as either client reports it.
const isUnknownTopic = e => e && (e.type === 'UNKNOWN_TOPIC_OR_PARTITION' || e.code === 3 ||
  /unknown topic or partition/i.test(String(e.message)))

function topic (scenario) {
  return `conf-${NAME}-${scenario.replace(/ /g, '-')}-${RUN}`
}

async function withAdmin (fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

async function createTopic (name, numPartitions, configEntries = []) {
  await withAdmin(async admin => {
    const created = await admin.createTopics({ topics: [{ topic: name, numPartitions, replicationFactor: 1, configEntries }], timeout: WAIT_MS })
    check(created, `topic ${name} was not created`)
  })
}

// Writes keyed records with a header to a new 3-partition topic in one send; each partition's
// batch must be acknowledged at offset 0 and the partition must then end at its record count.
async function produce (scenario) {
  const t = topic(scenario)
  await createTopic(t, 3)
  const producer = kafka.producer(CONFLUENT ? settings({ idempotent: true, acks: -1 }) : { idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  try {
    const messages = []
    for (let i = 0; i < RECORDS; i++) {
      messages.push({ key: `k${i}`, value: `v${i}`, partition: i % 3, headers: { h: `x${i}` } })
    }
    const meta = await producer.send(CONFLUENT ? { topic: t, messages } : { topic: t, messages, acks: -1, timeout: WAIT_MS })
    for (const m of meta) {
      // The compatible API answers an offset per record rather than a batch's base offset.
      const first = CONFLUENT ? true : m.baseOffset === '0'
      check(m.errorCode === 0 && first, `partition ${m.partition} acked base offset ${m.baseOffset} (error ${m.errorCode}), expected 0`)
    }
  } finally {
    await producer.disconnect()
  }
  await withAdmin(async admin => {
    const offsets = await admin.fetchTopicOffsets(t)
    check(offsets.length === 3, `${offsets.length} partitions in fetchTopicOffsets, expected 3`)
    for (const o of offsets) {
      const want = Math.floor((RECORDS - o.partition + 2) / 3)
      check(Number(o.high) === want, `partition ${o.partition} ends at ${o.high}, expected ${want}`)
    }
  })
  return t
}

function verify (got, want) {
  check(got.length === want, `consumed ${got.length} records, expected ${want}`)
  const last = {}
  for (const r of got) {
    const i = Number(r.key.slice(1))
    check(r.value === `v${i}`, `record k${i} has value ${r.value}`)
    check(r.headers.length === 1 && r.headers[0][0] === 'h' && r.headers[0][1] === `x${i}`, `record k${i} has headers ${JSON.stringify(r.headers)}`)
    check(r.partition === i % 3, `record k${i} on partition ${r.partition}`)
    check((last[r.partition] ?? -1) < i, `partition ${r.partition} out of order at k${i}`)
    last[r.partition] = i
  }
}

// Runs a consumer of group `groupId` on `t` from the beginning until `want` records arrived
// (or WAIT_MS passed), `extraMs` longer, and commits what it read if asked.
async function consume (t, groupId, want, { commit = false, extraMs = 0, readUncommitted = false } = {}) {
  const common = { groupId, readUncommitted, maxWaitTimeInMs: 500, sessionTimeout: WAIT_MS, rebalanceTimeout: WAIT_MS }
  const consumer = kafka.consumer(CONFLUENT ? settings({ ...common, fromBeginning: true, autoCommit: false }) : common)
  const got = []
  const next = {}
  let crashed = null
  if (!CONFLUENT) consumer.on(consumer.events.CRASH, e => { crashed = e.payload.error })
  await consumer.connect()
  try {
    await consumer.subscribe(CONFLUENT ? { topics: [t] } : { topics: [t], fromBeginning: true })
    await consumer.run({
      ...(CONFLUENT ? {} : { autoCommit: false }),
      eachMessage: async ({ partition, message }) => {
        got.push({
          partition,
          key: message.key && message.key.toString(),
          value: message.value && message.value.toString(),
          headers: Object.entries(message.headers || {}).map(([k, v]) => [k, v.toString()])
        })
        next[partition] = (BigInt(message.offset) + 1n).toString()
      }
    })
    const deadline = Date.now() + WAIT_MS
    while (got.length < want && Date.now() < deadline && !crashed) await sleep(100)
    if (extraMs) await sleep(extraMs)
    if (crashed) throw crashed
    if (commit) {
      await consumer.commitOffsets(Object.entries(next).map(([partition, offset]) => ({ topic: t, partition: Number(partition), offset })))
    }
  } finally {
    await consumer.disconnect()
  }
  return got
}

async function scenarioAdmin () {
  const t = topic('admin')
  await withAdmin(async admin => {
    if (!CONFLUENT) {
      const cluster = await admin.describeCluster()
      check(cluster.brokers.length > 0, 'describeCluster returned no brokers')
    }
    await admin.createTopics({ topics: [{ topic: t, numPartitions: 2, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }], timeout: WAIT_MS })
    // The compatible admin client cannot add partitions: it sees the two it created.
    const partitions = CONFLUENT ? 2 : 4
    if (!CONFLUENT) await admin.createPartitions({ topicPartitions: [{ topic: t, count: 4 }], timeout: WAIT_MS })
    // Metadata may lag the controller for a moment (it does on Apache Kafka, which can even
    // answer that the new topic is unknown): poll for it.
    const deadline = Date.now() + WAIT_MS
    for (;;) {
      const md = await admin.fetchTopicMetadata({ topics: [t] }).catch(e => {
        if (isUnknownTopic(e) && Date.now() < deadline) return null
        throw e
      })
      const topicMd = md && (CONFLUENT ? md[0] : md.topics[0])
      const n = topicMd ? topicMd.partitions.length : 0
      if (n === partitions) break
      check(Date.now() < deadline, `${n} partitions, expected ${partitions}`)
      await sleep(100)
    }
    if (!CONFLUENT) {
      const cfg = await admin.describeConfigs({ resources: [{ type: 2 /* TOPIC */, name: t, configNames: ['retention.ms'] }], includeSynonyms: false })
      const res = cfg.resources[0]
      check(res.errorCode === 0, `describeConfigs: error ${res.errorCode} ${res.errorMessage}`)
      const entry = res.configEntries.find(e => e.configName === 'retention.ms')
      check(entry && entry.configValue === '3600000', `retention.ms is ${entry && entry.configValue}`)
    }
    await admin.deleteTopics({ topics: [t], timeout: WAIT_MS })
    const deleted = Date.now() + WAIT_MS
    while ((await admin.listTopics()).includes(t)) {
      check(Date.now() < deleted, 'deleted topic still listed')
      await sleep(100)
    }
  })
}

async function scenarioProduce () {
  await produce('produce idempotent')
}

async function scenarioGroup () {
  const t = await produce('group')
  const g = `conf-${NAME}-${RUN}`
  verify(await consume(t, g, RECORDS, { commit: true }), RECORDS)
  await withAdmin(async admin => {
    const offsets = await admin.fetchOffsets({ groupId: g, topics: [t] })
    const total = offsets[0].partitions.reduce((sum, p) => sum + Math.max(Number(p.offset), 0), 0)
    check(total === RECORDS, `committed offsets add up to ${total}, expected ${RECORDS}`)
  })
}

async function scenarioTransactions () {
  const t = topic('transactions')
  await createTopic(t, 1)
  const transactional = { transactionalId: `conformance-${NAME}-txn`, idempotent: true, transactionTimeout: WAIT_MS }
  const producer = kafka.producer(CONFLUENT ? settings(transactional) : { ...transactional, maxInFlightRequests: 1 })
  await producer.connect()
  try {
    for (const [n, commit] of [[10, true], [10, false], [1, true]]) {
      const txn = await producer.transaction()
      const messages = Array.from({ length: n }, () => ({ value: commit ? 'committed' : 'aborted' }))
      await txn.send(CONFLUENT ? { topic: t, messages } : { topic: t, messages, timeout: WAIT_MS })
      await (commit ? txn.commit() : txn.abort())
    }
  } finally {
    await producer.disconnect()
  }
  // A little longer than the 11 records: aborted records must not arrive.
  const got = await consume(t, `conf-${NAME}-txn-${RUN}`, 11, { extraMs: 500 })
  check(got.every(r => r.value === 'committed'), 'read_committed consumer saw aborted records')
  check(got.length === 11, `read_committed consumer read ${got.length} records, expected 11`)
}

const SCENARIOS = {
  admin: scenarioAdmin,
  'produce idempotent': scenarioProduce,
  group: scenarioGroup,
  transactions: scenarioTransactions
}

async function main () {
  const brokers = process.argv[2].split(',')
  kafka = new Kafka(settings({
    clientId: `conformance-${NAME}`,
    brokers,
    connectionTimeout: WAIT_MS,
    requestTimeout: WAIT_MS,
    logLevel: logLevel.ERROR,
    retry: { retries: 5 }
  }))
  console.log(`VERSION\t${version}`)
  const chosen = process.argv.length > 3 ? process.argv.slice(3) : Object.keys(SCENARIOS)
  for (const name of chosen) {
    let timer
    try {
      await Promise.race([
        SCENARIOS[name](),
        new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Failed('scenario timed out')), 4 * WAIT_MS) })
      ])
      console.log(`RESULT\t${name}\tPASS\t`)
    } catch (e) {
      const reason = `${e.name}: ${e.message}`.replace(/[\t\n]/g, ' ')
      console.log(`RESULT\t${name}\tFAIL\t${reason}`)
    } finally {
      clearTimeout(timer)
    }
  }
  process.exit(0)
}

main()
