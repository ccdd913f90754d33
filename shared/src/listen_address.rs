//! The `address:port` syntax the operator writes into pod environments and the binaries read.
//!
//! The operator cannot bracket an IPv6 pod IP: it writes `$(MY_POD_IP):9092` and the kubelet
//! substitutes the bare address, so an IPv6 pod gets `fd00::5:9092`. A colon-separated string
//! whose last part is a port is therefore read as address and port, as well as the standard
//! `[fd00::5]:9092` and `10.0.0.5:9092`.

use std::net::{IpAddr, SocketAddr};

/// Parses a listen address: `ip:port`, `[ipv6]:port`, or an unbracketed `ipv6:port`.
pub fn parse(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let invalid = || format!("{text:?} is not an address:port (e.g. 0.0.0.0:9092, [::]:9092 or fd00::5:9092)");
    let (ip, port) = text.rsplit_once(':').ok_or_else(invalid)?;
    let ip: IpAddr = ip.parse().map_err(|_| invalid())?;
    let port: u16 = port.parse().map_err(|_| invalid())?;
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_ipv4_bracketed_and_bare_ipv6() {
        assert_eq!(parse("10.0.0.5:9092").map(|a| a.to_string()), Ok("10.0.0.5:9092".to_string()));
        assert_eq!(parse("[fd00::5]:9092").map(|a| a.to_string()), Ok("[fd00::5]:9092".to_string()));
        assert_eq!(parse("fd00::5:9092").map(|a| a.to_string()), Ok("[fd00::5]:9092".to_string()));
        assert_eq!(parse("[::]:0").map(|a| a.to_string()), Ok("[::]:0".to_string()));
    }

    #[test]
    fn refuses_what_is_not_an_address_and_port() {
        for bad in ["", "9092", "localhost:9092", "10.0.0.5", "10.0.0.5:99999", "fd00::5", "[fd00::5]"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
