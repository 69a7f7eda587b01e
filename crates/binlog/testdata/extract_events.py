#!/usr/bin/env python3
"""Extract the binlog events from the replication captures in the lab's capture directory (docs/evidence/replication-protocol.md) into test fixtures.

Needs only the Python standard library (no tshark): reads the classic pcap format (Ethernet link type),
reassembles each TCP connection's server->client bytes, splits MySQL packets (3-byte length + sequence id) and
keeps the packets of the dump stream: `00` (OK marker) `EF <flag>` (semi-sync header) followed by one event whose
header event_size equals the rest of the packet.

Writes:
  captured/<capture>.events.hex   every event, one per line, with a comment line naming where it came from
  annotated/<name>.hex            one event per type, field by field (used by tests/fixtures.rs)
and the fuzz seed corpus ../fuzz/corpus/decode_event/<capture>-<n>.bin.

Usage: python3 extract_events.py <directory holding the .pcap captures>
This independent decoder (not the Rust code under test) produces the annotations, so a fixture checks the codec.
"""
import collections, os, struct, sys, zlib

EV = {2: 'QUERY', 3: 'STOP', 4: 'ROTATE', 15: 'FORMAT_DESCRIPTION', 16: 'XID', 19: 'TABLE_MAP', 23: 'WRITE_ROWS_V1',
      24: 'UPDATE_ROWS_V1', 25: 'DELETE_ROWS_V1', 27: 'HEARTBEAT', 160: 'ANNOTATE_ROWS', 161: 'BINLOG_CHECKPOINT',
      162: 'GTID', 163: 'GTID_LIST'}
CAPTURES = ['repl-handshake-and-stream.pcap', 'repl-setup.pcap', 'repl-error-1236.pcap']
HERE = os.path.dirname(os.path.abspath(__file__))


def tcp_segments(path):
    d = open(path, 'rb').read()
    magic, _, _, _, _, _, link = struct.unpack('<IHHiIII', d[:24])
    assert magic == 0xa1b2c3d4 and link == 1, (path, hex(magic), link)
    off = 24
    while off + 16 <= len(d):
        _, _, incl, _ = struct.unpack('<IIII', d[off:off + 16])
        frame = d[off + 16:off + 16 + incl]
        off += 16 + incl
        eth_type = struct.unpack('>H', frame[12:14])[0]
        if eth_type == 0x0800:
            ip = frame[14:]
            ihl = (ip[0] & 0x0f) * 4
            total = struct.unpack('>H', ip[2:4])[0]
            if ip[9] != 6:
                continue
            src, dst, tcp = ip[12:16], ip[16:20], ip[ihl:total]
        elif eth_type == 0x86dd:
            ip = frame[14:]
            plen = struct.unpack('>H', ip[4:6])[0]
            if ip[6] != 6:
                continue
            src, dst, tcp = ip[8:24], ip[24:40], ip[40:40 + plen]
        else:
            continue
        sport, dport, seq = struct.unpack('>HHI', tcp[:8])
        doff = (tcp[12] >> 4) * 4
        yield (src, sport, dst, dport, seq, tcp[doff:])


def server_streams(path, port):
    """server->client byte stream of each connection, in order of first appearance (like tshark's tcp.stream)."""
    streams = collections.OrderedDict()
    seen = {}
    for src, sport, dst, dport, seq, payload in tcp_segments(path):
        key = tuple(sorted([(src, sport), (dst, dport)]))
        streams.setdefault(key, b'')
        if sport != port or not payload:
            continue
        conn = (src, sport, dst, dport)
        if seq in seen.setdefault(conn, set()):
            continue  # retransmission
        seen[conn].add(seq)
        streams[key] += payload
    return list(streams.values())


def packets(buf):
    while len(buf) >= 4:
        ln = int.from_bytes(buf[:3], 'little')
        if len(buf) < 4 + ln:
            break
        yield buf[3], buf[4:4 + ln]
        buf = buf[4 + ln:]


def events(path, port=23306):
    for n, stream in enumerate(server_streams(path, port)):
        for seq, p in packets(stream):
            if len(p) >= 3 + 19 and p[0] == 0 and p[1] == 0xEF and p[2] in (0, 1):
                ev = p[3:]
                if struct.unpack('<I', ev[9:13])[0] == len(ev):
                    yield n, seq, p[2], ev


def summary(ev):
    ts, typ, sid, size, pos, flags = struct.unpack('<IBIIIH', ev[:19])
    return f'{EV.get(typ, typ)}({typ}) ts={ts} server_id={sid} size={size} log_pos={pos} flags=0x{flags:04x}'


def hexs(b):
    return ' '.join(f'{x:02x}' for x in b)


def annotate(ev):
    """Field-by-field lines: '<hex>  # <field> = <value>'."""
    out = []
    covered = [0]

    def field(b, what):
        covered[0] += len(b)
        out.append(f'{hexs(b):<48} # {what}')

    ts, typ, sid, size, pos, flags = struct.unpack('<IBIIIH', ev[:19])
    field(ev[0:4], f'timestamp = {ts}')
    field(ev[4:5], f'type_code = {typ} ({EV.get(typ, "?")})')
    field(ev[5:9], f'server_id = {sid}')
    field(ev[9:13], f'event_size = {size}')
    field(ev[13:17], f'log_pos = {pos}')
    field(ev[17:19], f'flags = 0x{flags:04x}')
    body, crc = ev[19:-4], ev[-4:]
    assert zlib.crc32(ev[:-4]) == struct.unpack('<I', crc)[0]
    if typ == 4:
        field(body[:8], f'position = {struct.unpack("<Q", body[:8])[0]}')
        field(body[8:], f'file name = {body[8:].decode()!r}')
    elif typ == 15:
        field(body[0:2], f'binlog_version = {struct.unpack("<H", body[:2])[0]}')
        field(body[2:52], f'server_version = {body[2:52].rstrip(bytes(1)).decode()!r} (50 bytes, NUL padded)')
        field(body[52:56], f'create_timestamp = {struct.unpack("<I", body[52:56])[0]}')
        field(body[56:57], f'common_header_len = {body[56]}')
        field(body[57:-1], f'post_header_len[type 1..={len(body) - 58}]')
        field(body[-1:], f'checksum_alg = {body[-1]} (1 = CRC32)')
    elif typ == 163:
        raw = struct.unpack('<I', body[:4])[0]
        field(body[:4], f'count = {raw & 0x0fffffff}, flags = 0x{raw >> 28:x}')
        for k in range(raw & 0x0fffffff):
            t = body[4 + 16 * k:20 + 16 * k]
            d, s, q = struct.unpack('<IIQ', t)
            field(t, f'gtid[{k}] = {d}-{s}-{q} (domain u32, server_id u32, seq_no u64)')
        pad = body[4 + 16 * (raw & 0x0fffffff):]
        if pad:
            field(pad, 'padding (MariaDB pads an empty list to 2 more bytes)')
    elif typ == 161:
        ln = struct.unpack('<I', body[:4])[0]
        field(body[:4], f'file name length = {ln}')
        field(body[4:], f'file name = {body[4:].decode()!r}')
    elif typ == 162:
        q, d, f2 = struct.unpack('<QIB', body[:13])
        field(body[0:8], f'seq_no = {q}')
        field(body[8:12], f'domain_id = {d}')
        field(body[12:13], f'flags2 = 0x{f2:02x}')
        rest = body[13:]
        if f2 & 2:
            field(rest[:8], f'commit_id = {struct.unpack("<Q", rest[:8])[0]}')
            rest = rest[8:]
        field(rest, 'padding / extra (kept opaque)')
    elif typ == 2:
        tid, et, dbl, err, stl = struct.unpack('<IIBHH', body[:13])
        field(body[0:4], f'thread_id = {tid}')
        field(body[4:8], f'exec_time = {et}')
        field(body[8:9], f'db_len = {dbl}')
        field(body[9:11], f'error_code = {err}')
        field(body[11:13], f'status_vars_len = {stl}')
        field(body[13:13 + stl], 'status_vars (opaque)')
        field(body[13 + stl:13 + stl + dbl], f'db = {body[13 + stl:13 + stl + dbl].decode()!r}')
        field(body[13 + stl + dbl:14 + stl + dbl], 'db terminator NUL')
        field(body[14 + stl + dbl:], f'query = {body[14 + stl + dbl:].decode()!r}')
    elif typ == 16:
        field(body, f'xid = {struct.unpack("<Q", body)[0]}')
    elif typ == 160:
        field(body, f'sql text = {body.decode()!r}')
    elif typ in (19, 23, 24, 25):
        field(body[:6], f'table_id = {int.from_bytes(body[:6], "little")}')
        field(body[6:8], f'flags = 0x{struct.unpack("<H", body[6:8])[0]:04x}')
        field(body[8:], 'rest of body (kept opaque)')
    elif typ == 27:
        field(body, f'file name = {body.decode()!r}')
    else:
        field(body, 'body')
    field(crc, f'crc32 = 0x{struct.unpack("<I", crc)[0]:08x} (zlib crc32 of all bytes above)')
    assert covered[0] == len(ev), f'annotation covers {covered[0]} of {len(ev)} bytes: {summary(ev)}'
    return out


def main(evidence):
    cap_dir = os.path.join(HERE, 'captured')
    ann_dir = os.path.join(HERE, 'annotated')
    corpus = os.path.join(HERE, '..', 'fuzz', 'corpus', 'decode_event')
    for d in (cap_dir, ann_dir, corpus):
        os.makedirs(d, exist_ok=True)
    picked = {}
    for cap in CAPTURES:
        stem = cap[:-len('.pcap')]
        lines = [f'# Every binlog event the master sent in the lab capture {cap} (MariaDB 10.11.19, binlog_checksum=CRC32),',
                 '# one per line as hex, without the packet header and the 00 EF <flag> prefix. Made by extract_events.py.']
        count = 0
        for n, seq, ack, ev in events(os.path.join(evidence, cap)):
            lines.append(f'# tcp stream {n} packet seq={seq} semisync_ack_requested={ack}: {summary(ev)}')
            lines.append(ev.hex())
            with open(os.path.join(corpus, f'{stem}-{count:03d}.bin'), 'wb') as f:
                f.write(ev)
            count += 1
            ts, typ, _, _, _, flags = struct.unpack('<IBIIIH', ev[:19])
            name = {4: 'rotate-fake', 15: 'format-description', 16: 'xid', 19: 'table-map', 23: 'write-rows-v1',
                    24: 'update-rows-v1', 25: 'delete-rows-v1', 27: 'heartbeat', 160: 'annotate-rows',
                    161: 'binlog-checkpoint'}.get(typ)
            if typ == 163:
                name = 'gtid-list-artificial' if flags & 0x20 else 'gtid-list-empty'
            if typ == 162:
                name = 'gtid-ddl' if ev[19 + 12] & 0x20 else 'gtid-trx'
            if typ == 2:
                name = 'query-with-db' if ev[19 + 8] else 'query-no-db'
            if name and name not in picked:
                picked[name] = (cap, n, seq, ev)
        if count:
            with open(os.path.join(cap_dir, f'{stem}.events.hex'), 'w') as f:
                f.write('\n'.join(lines) + '\n')
        print(f'{cap}: {count} events')
    for name, (cap, n, seq, ev) in sorted(picked.items()):
        with open(os.path.join(ann_dir, f'{name}.hex'), 'w') as f:
            f.write(f'# {summary(ev)}\n# from the lab capture {cap}, tcp stream {n}, packet seq={seq}. Made by extract_events.py.\n')
            f.write('\n'.join(annotate(ev)) + '\n')
    print('annotated:', ', '.join(sorted(picked)))


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else '.')
