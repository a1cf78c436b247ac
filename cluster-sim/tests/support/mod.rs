//! What both of this crate's test binaries need: container ports no other process holds.
//!
//! Loopback fleets in different processes (parallel test binaries, or two checkouts testing
//! at once) hand out the same pod addresses, so a fixed container port collides; the OS picks
//! these instead.

use std::net::{Ipv4Addr, TcpListener, UdpSocket};

/// `N` distinct ports that a moment ago were free for both TCP and UDP on every loopback
/// address. Each is bound on the unspecified address while the others are chosen, so they
/// differ; another process could still take one before a pod binds it, but it would have to
/// be handed the same ephemeral port in that instant.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut held = Vec::with_capacity(N);
    while held.len() < N {
        let tcp = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("binding a TCP port");
        let port = tcp.local_addr().expect("a bound address").port();
        // The OS chose the port for TCP; a UDP socket may hold it, then take another.
        if let Ok(udp) = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)) {
            held.push((port, tcp, udp));
        }
    }
    std::array::from_fn(|i| held[i].0)
}
