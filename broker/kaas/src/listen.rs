//! Where the broker's listeners bind and which address it advertises.
//!
//! The operator binds brokers to `[::]` (every address, so `kubectl port-forward`, which dials
//! localhost in the pod, reaches them) and advertises the pod's DNS name or IP, which on an IPv6
//! cluster arrives unbracketed (`fd00::5:9092`: the kubelet substitutes `$(MY_POD_IP)` as it is).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context, bail};
use tokio::net::TcpListener;

/// Binds `addr`. The IPv6 wildcard `[::]` is dual-stack on Linux (IPv4 clients arrive as mapped
/// addresses); where the kernel has no IPv6 at all it falls back to `0.0.0.0`.
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let first = match TcpListener::bind(addr).await {
        Ok(listener) => return Ok(listener),
        Err(e) => e,
    };
    if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        && let Ok(listener) = TcpListener::bind((Ipv4Addr::UNSPECIFIED, addr.port())).await
    {
        tracing::warn!(error = %first, "cannot bind {addr}; listening on IPv4 only");
        return Ok(listener);
    }
    Err(first).with_context(|| format!("binding {addr}"))
}

/// The advertised host and port: `flag` (`host:port`, `[ipv6]:port` or the unbracketed
/// `ipv6:port`), or else the bound address (a wildcard bind advertises loopback, the only
/// address known to reach it). The host comes back without brackets, as Kafka's Metadata
/// carries it.
pub(crate) fn advertised(flag: Option<&str>, bound: SocketAddr) -> anyhow::Result<(String, u16)> {
    let Some(value) = flag else {
        let ip = if bound.ip().is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { bound.ip() };
        return Ok((ip.to_string(), bound.port()));
    };
    let (host, port) = value.rsplit_once(':').with_context(|| format!("--advertise {value:?} is not host:port"))?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0).with_context(|| format!("--advertise {value:?} has no valid port"))?;
    let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(inner) => inner,
        None => host,
    };
    // A host with a colon can only be an IPv6 address; anything else is a mistake such as a
    // missing port (`fd00::5`).
    if host.is_empty() || (host.contains(':') && host.parse::<Ipv6Addr>().is_err()) {
        bail!("--advertise {value:?} is not host:port (e.g. kaas-0.kaas-brokers.ns.svc:9092, 10.0.0.5:9092 or [fd00::5]:9092)");
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::advertised;

    fn adv(flag: Option<&str>, bound: &str) -> Result<(String, u16), String> {
        advertised(flag, bound.parse().map_err(|_| "bad bound")?).map_err(|e| e.to_string())
    }

    #[test]
    fn advertises_the_flag_without_brackets() {
        let wildcard = "[::]:9092";
        for (flag, host) in [
            ("kc-0.kc-brokers.demo.svc:9092", "kc-0.kc-brokers.demo.svc"),
            ("10.0.0.5:9092", "10.0.0.5"),
            ("[fd00::5]:9092", "fd00::5"),
            // $(MY_POD_IP):9092 with an IPv6 pod IP.
            ("fd00::5:9092", "fd00::5"),
            ("[::1]:9092", "::1"),
        ] {
            assert_eq!(adv(Some(flag), wildcard), Ok((host.to_string(), 9092)), "{flag}");
        }
    }

    #[test]
    fn never_advertises_the_wildcard() {
        assert_eq!(adv(None, "[::]:9092"), Ok(("127.0.0.1".to_string(), 9092)));
        assert_eq!(adv(None, "0.0.0.0:9092"), Ok(("127.0.0.1".to_string(), 9092)));
        assert_eq!(adv(None, "[fd00::5]:9092"), Ok(("fd00::5".to_string(), 9092)));
        assert_eq!(adv(None, "10.0.0.5:19092"), Ok(("10.0.0.5".to_string(), 19092)));
    }

    #[test]
    fn refuses_what_is_not_host_and_port() {
        for bad in ["kc-0", "kc-0:", "kc-0:0", ":9092", "[fd00::5]", "fd00::5", "fd00:::x:9092", "[]:9092"] {
            assert!(adv(Some(bad), "[::]:9092").is_err(), "{bad:?} accepted");
        }
    }

    #[tokio::test]
    async fn the_wildcard_takes_ipv4_and_ipv6_clients() {
        let listener = super::bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = listener.accept().await;
            }
        });
        assert!(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok());
        if std::net::TcpListener::bind("[::1]:0").is_ok() {
            assert!(tokio::net::TcpStream::connect(("::1", port)).await.is_ok());
        }
        accept.abort();
    }
}
