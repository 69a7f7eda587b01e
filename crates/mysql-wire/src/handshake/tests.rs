use super::*;

/// A greeting as MariaDB 10.11.19 sends it (layout of the replication capture, nonce made up).
fn mariadb_greeting() -> Vec<u8> {
    let mut g = vec![10];
    g.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1-log\0");
    g.extend_from_slice(&174u32.to_le_bytes()); // connection id
    g.extend_from_slice(b"abcdefgh"); // scramble part 1
    g.push(0); // filler
    g.extend_from_slice(&0xf7feu16.to_le_bytes()); // caps low
    g.push(45); // charset
    g.extend_from_slice(&2u16.to_le_bytes()); // status: autocommit
    g.extend_from_slice(&0x81ffu16.to_le_bytes()); // caps high (incl. PLUGIN_AUTH, LENENC data)
    g.push(21); // auth data length
    g.extend_from_slice(&[0; 6]);
    g.extend_from_slice(&0x1du32.to_le_bytes()); // MariaDB extended caps
    g.extend_from_slice(b"ijklmnopqrst\0"); // scramble part 2 + NUL
    g.extend_from_slice(b"mysql_native_password\0");
    g
}

#[test]
fn greeting_fields_from_mariadb() {
    let g = Greeting::decode(&mariadb_greeting()).unwrap();
    assert_eq!(g.server_version, "5.5.5-10.11.19-MariaDB-0+deb12u1-log");
    assert_eq!((g.connection_id, g.charset, g.status), (174, 45, 2));
    assert_eq!(g.scramble, b"abcdefghijklmnopqrst");
    assert_eq!(g.auth_plugin, NATIVE_PASSWORD);
    let bytes = mariadb_greeting();
    for cut in 0..bytes.len() - 22 {
        assert!(Greeting::decode(&bytes[..cut]).is_err(), "cut {cut}");
    }
}

#[test]
fn greeting_round_trip() {
    let g = Greeting {
        server_version: "10.11.99-paxsql".into(),
        connection_id: 7,
        capabilities: caps::PROTOCOL_41 | caps::SECURE_CONNECTION | caps::PLUGIN_AUTH | caps::DEPRECATE_EOF,
        charset: 45,
        status: crate::STATUS_AUTOCOMMIT,
        scramble: b"01234567890123456789".to_vec(),
        auth_plugin: NATIVE_PASSWORD.into(),
    };
    assert_eq!(Greeting::decode(&g.encode()).unwrap(), g);
}

#[test]
fn greeting_capabilities_are_rewritten_in_place() {
    let mut packet = Vec::new();
    crate::packet::encode(0, &mariadb_greeting(), &mut packet);
    set_greeting_capabilities(&mut packet, |low| low & !(caps::SSL as u16) & !(caps::COMPRESS as u16));
    let g = Greeting::decode(&packet[4..]).unwrap();
    assert_eq!(g.capabilities & (caps::SSL | caps::COMPRESS), 0);
    assert_eq!(g.capabilities | caps::SSL | caps::COMPRESS, 0x81ff_f7fe | caps::SSL | caps::COMPRESS);
    // Not a greeting, or cut short: untouched.
    let mut err = vec![5, 0, 0, 0, 0xFF, 1, 2, 3, 4];
    set_greeting_capabilities(&mut err, |_| 0);
    assert_eq!(err, [5, 0, 0, 0, 0xFF, 1, 2, 3, 4]);
    let mut short = packet[..10].to_vec();
    let before = short.clone();
    set_greeting_capabilities(&mut short, |_| 0);
    assert_eq!(short, before);
}

fn sample(capabilities: u32, database: Option<&str>, plugin: Option<&str>, auth_len: usize) -> LoginRequest {
    LoginRequest {
        capabilities: capabilities | caps::PROTOCOL_41,
        max_packet: 16 << 20,
        charset: 45,
        user: b"admin".to_vec(),
        auth_response: (0..auth_len as u8).map(|i| i.wrapping_mul(37).wrapping_add(1)).collect(),
        database: database.map(|d| d.as_bytes().to_vec()),
        plugin: plugin.map(|p| p.as_bytes().to_vec()),
    }
}

#[test]
fn login_encode_decode_round_trip() {
    let cases = [
        sample(caps::SECURE_CONNECTION | caps::PLUGIN_AUTH, None, Some("mysql_native_password"), 20),
        sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::PLUGIN_AUTH, None, Some("client_ed25519"), 300),
        sample(
            caps::SECURE_CONNECTION | caps::CONNECT_WITH_DB | caps::PLUGIN_AUTH | caps::DEPRECATE_EOF,
            Some("paxsql"),
            Some("mysql_native_password"),
            20,
        ),
        sample(caps::SECURE_CONNECTION, None, None, 0),
        sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::CONNECT_WITH_DB, Some("x"), None, 0),
    ];
    for login in cases {
        let bytes = login.encode();
        assert_eq!(LoginRequest::decode(&bytes).unwrap(), FirstPacket::Login(login.clone()), "{login:?}");
        assert_eq!(login_user(&bytes), Some("admin"));
    }
}

#[test]
fn decodes_a_mariadb_cli_login() {
    // Shaped like the mariadb 10.11 CLI's `-u admin -p... -D paxsql` without connection attributes: caps
    // 0x81aea20d (CONNECT_WITH_DB, PROTOCOL_41, SECURE_CONNECTION, PLUGIN_AUTH, PLUGIN_AUTH_LENENC,
    // DEPRECATE_EOF, ...), max packet 16 MiB, charset 33.
    let mut p = Vec::new();
    p.extend_from_slice(&0x81ae_a20du32.to_le_bytes());
    p.extend_from_slice(&0x0100_0000u32.to_le_bytes());
    p.push(33);
    p.extend_from_slice(&[0; 23]);
    p.extend_from_slice(b"admin\0");
    p.push(20);
    p.extend_from_slice(&[0xAA; 20]);
    p.extend_from_slice(b"paxsql\0");
    p.extend_from_slice(b"mysql_native_password\0");
    let FirstPacket::Login(login) = LoginRequest::decode(&p).unwrap() else { panic!("not a login") };
    assert_eq!(login.user, b"admin");
    assert_eq!(login.auth_response, vec![0xAA; 20]);
    assert_eq!(login.database.as_deref(), Some(&b"paxsql"[..]));
    assert!(!login.needs_auth_switch());
}

#[test]
fn a_client_login_carries_what_both_sides_have() {
    let g = Greeting::decode(&mariadb_greeting()).unwrap();
    let wanted = caps::LONG_PASSWORD
        | caps::PROTOCOL_41
        | caps::SECURE_CONNECTION
        | caps::PLUGIN_AUTH
        | caps::PLUGIN_AUTH_LENENC_CLIENT_DATA;
    let token = crate::auth::token(b"replpw", &g.scramble);
    let p = LoginRequest::native(wanted, g.capabilities, 1 << 30, "repl", token.clone()).encode();
    assert_eq!(login_capabilities(&p) & wanted, wanted);
    assert_eq!(&p[32..37], b"repl\0");
    assert_eq!(p[37], 20); // lenenc token length
    assert_eq!(&p[38..58], &token[..]);
    assert!(p.ends_with(b"mysql_native_password\0"));
}

#[test]
fn tls_request_and_old_protocol_are_recognised() {
    let mut p = Vec::new();
    p.extend_from_slice(&(caps::PROTOCOL_41 | caps::SSL).to_le_bytes());
    p.extend_from_slice(&[0; 28]);
    assert_eq!(LoginRequest::decode(&p).unwrap(), FirstPacket::TlsRequest);
    assert!(is_ssl_request(&p));
    let mut full = p.clone();
    full.extend_from_slice(b"app\0");
    assert!(!is_ssl_request(&full));
    clear_ssl_capability(&mut full);
    assert_eq!(login_capabilities(&full), caps::PROTOCOL_41);
    assert!(!is_ssl_request(&[0u8; 32]));
    // HandshakeResponse320: 2-byte capabilities without CLIENT_PROTOCOL_41, 3-byte max packet, user.
    assert_eq!(LoginRequest::decode(&[0x05, 0x80, 0, 0, 0, b'u', 0]).unwrap(), FirstPacket::Protocol320);
}

#[test]
fn truncated_logins_are_errors_not_panics() {
    let full = sample(caps::PLUGIN_AUTH_LENENC_CLIENT_DATA | caps::PLUGIN_AUTH, Some("db"), Some("p"), 20).encode();
    for len in 0..full.len() {
        // Every prefix either decodes (the trailing NUL-terminated fields may be cut) or is an error.
        let _ = LoginRequest::decode(&full[..len]);
        let _ = login_user(&full[..len]);
    }
    assert!(LoginRequest::decode(&full[..10]).is_err());
    let mut p = full[..32].to_vec();
    p.extend_from_slice(b"u\0");
    p.extend_from_slice(&[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]);
    assert!(LoginRequest::decode(&p).is_err());
}

#[test]
fn change_user_names() {
    assert_eq!(change_user_name(b"\x11root\0rest"), Some("root"));
    assert_eq!(change_user_name(b"\x11root"), None);
    assert_eq!(change_user_name(b""), None);
    assert_eq!(change_user_name(b"\x11\xff\0"), None);
}

#[test]
fn auth_replies() {
    assert_eq!(AuthReply::decode(&crate::ok_payload()).unwrap(), AuthReply::Ok);
    let switch = auth_switch_request(b"01234567890123456789");
    assert_eq!(
        AuthReply::decode(&switch).unwrap(),
        AuthReply::Switch { plugin: NATIVE_PASSWORD.into(), data: b"01234567890123456789".to_vec() }
    );
    assert_eq!(
        AuthReply::decode(&[0xFE]).unwrap(),
        AuthReply::Switch { plugin: "mysql_old_password".into(), data: vec![] }
    );
    let denied = ErrPacket::new(1045, "28000", "Access denied");
    assert_eq!(AuthReply::decode(&denied.payload()).unwrap(), AuthReply::Err(denied));
    assert_eq!(AuthReply::decode(&[0x01, 4]).unwrap(), AuthReply::MoreData);
    assert!(AuthReply::decode(&[]).is_err() && AuthReply::decode(&[0x42]).is_err());
}
