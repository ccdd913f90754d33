#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine; quick when all is there.
#  - Debian packages: cmake and compilers for librdkafka (the rdkafka crate builds it), curl and
#    ssl headers it probes for, kcat (a stock client the tests drive), FUSE for the NFS tests,
#    ip and nsenter for the e2e harness's network namespace, openssl (a test makes a CA with
#    it as a user would), containerd, runc, the CNI plugins and iptables for the e2e harness's
#    real-kubelet leg (e2e/images/realkubelet_test.go), and a JRE unless keytool is there
#    (the operator's tests read its KafkaUsers' PKCS#12 keystores with Java's keytool).
#  - A Python virtualenv in the cache with kafka-python, aiokafka and confluent-kafka (the Python
#    binding of librdkafka, which its wheel bundles): stock clients the tests drive.
set -euo pipefail

cache="${KAAS_CACHE:-$HOME/.cache/kaas}"
apt_packages=(build-essential cmake pkg-config libcurl4-openssl-dev libssl-dev zlib1g-dev kcat fuse3 libfuse3-dev iproute2 util-linux openssl containerd runc containernetworking-plugins iptables)
command -v keytool >/dev/null || apt_packages+=(default-jre-headless)
kafka_python_version="3.0.12"
# confluent-kafka's wheels bundle librdkafka (2.16.1 bundles librdkafka 2.16.0, the newest): this
# pins the librdkafka the conformance suite runs (e2e/conformance/python/confluent_kafka_conformance.py).
confluent_kafka_version="2.16.1"
# aiokafka (asyncio): e2e/conformance/python/aiokafka_conformance.py.
aiokafka_version="0.14.0"

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

venv="$cache/venv"
if ! "$venv/bin/python3" -c "import kafka; assert kafka.__version__ == '$kafka_python_version'" 2>/dev/null; then
  echo "creating $venv with kafka-python $kafka_python_version"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "kafka-python==$kafka_python_version"
fi
if ! "$venv/bin/python3" -c "import confluent_kafka; assert confluent_kafka.__version__ == '$confluent_kafka_version'" 2>/dev/null; then
  echo "installing confluent-kafka $confluent_kafka_version into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary confluent-kafka "confluent-kafka==$confluent_kafka_version"
fi
if ! "$venv/bin/python3" -c "import aiokafka; assert aiokafka.__version__ == '$aiokafka_version'" 2>/dev/null; then
  echo "installing aiokafka $aiokafka_version into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "aiokafka==$aiokafka_version"
fi
