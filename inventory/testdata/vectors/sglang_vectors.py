#!/usr/bin/env python3
"""SGLang page-hash vectors and an SGLang KV-event payload for llb's tests.

Standard library only. The page hash is written from SGLang's contract
(python/sglang/srt/mem_cache: get_hash_str / hash_str_to_int64, and the
native hash_binding.cpp that replaced them with the same byte layout):

  digest_0 = SHA-256( le32(t_0) ... le32(t_{P-1}) )             no parent at all
  digest_i = SHA-256( digest_{i-1} (32 raw bytes) || le32(t_iP) ... )
  event key = first 8 digest bytes, big-endian, as a signed int64

published once per page of --page-size tokens (radix_cache.py
_record_store_event: one BlockStored per page, parent_block_hash = the
previous page's key, None under the root).

How the committed vectors were made
  python3 sglang_vectors.py --upstream <file> > sglang-page-hash-vectors.json
where <file> held SGLang's own get_hash_str and hash_str_to_int64, copied
verbatim from sgl-project/sglang python/sglang/srt/mem_cache/hicache_storage.py
(not committed: it is SGLang's code). With --upstream every case is computed
a second time by SGLang's functions and the run fails on any difference.
The check values in llb's engines spec (tokens 1..48 in pages of 16, the
single token [0]) are asserted on every run.

Usage: python3 sglang_vectors.py [--upstream FILE]
"""

import hashlib
import importlib.util
import json
import struct
import sys


def page_digests(tokens, page_size, parent=None):
    """Full digests of the full pages of tokens, chained from parent."""
    out = []
    for start in range(0, len(tokens) // page_size * page_size, page_size):
        h = hashlib.sha256()
        if parent is not None:
            h.update(parent)
        for t in tokens[start:start + page_size]:
            h.update(struct.pack("<I", t))
        parent = h.digest()
        out.append(parent)
    return out


def event_key(digest):
    """The published value: first 8 bytes big-endian, signed."""
    return struct.unpack(">q", digest[:8])[0]


CASES = [
    ("tokens_1_48_page16", list(range(1, 49)), 16),
    ("single_token_0_page1", [0], 1),
    ("zeros_page16", [0] * 16, 16),
    ("le_teeth_page16", [65537, 2147483646, 2147483647, 2147483648, 4294967295] + list(range(11)), 16),
    ("chain2_page32", list(range(1000, 1064)), 32),
    ("page1_chain", [7, 8, 9, 10], 1),
    ("partial_tail_page16", list(range(100, 140)), 16),  # 40 tokens: 2 pages, 8 left over
]

CHECK = {  # from llb's engines spec
    "tokens_1_48_page16": [8635429971592222890, 1256577331724852459, 5689809685380680247],
    "single_token_0_page1": [-2360060374177730597],
}


def load_upstream(path):
    spec = importlib.util.spec_from_file_location("sglang_upstream", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def upstream_keys(mod, tokens, page_size):
    keys, prior = [], None
    for start in range(0, len(tokens) // page_size * page_size, page_size):
        hx = mod.get_hash_str(tokens[start:start + page_size], prior)
        keys.append(mod.hash_str_to_int64(hx))
        prior = hx
    return keys


# --- a hand-built msgpack batch as SGLang's msgspec encoder writes it -------
# EventBatch(array_like): [ts, events, attn_dp_rank]; KVCacheEvent(array_like,
# tag): ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
# lora_id, medium], ["BlockRemoved", block_hashes, medium], ["AllBlocksCleared"].

def mp_int(v):
    if 0 <= v <= 0x7F:
        return bytes([v])
    if -32 <= v < 0:
        return struct.pack("b", v)
    if v >= 0:
        for code, fmt, lim in ((0xCC, ">B", 1 << 8), (0xCD, ">H", 1 << 16), (0xCE, ">I", 1 << 32), (0xCF, ">Q", 1 << 64)):
            if v < lim:
                return bytes([code]) + struct.pack(fmt, v)
    for code, fmt, lim in ((0xD0, ">b", 1 << 7), (0xD1, ">h", 1 << 15), (0xD2, ">i", 1 << 31), (0xD3, ">q", 1 << 63)):
        if -lim <= v:
            return bytes([code]) + struct.pack(fmt, v)
    raise ValueError(v)


def mp_str(s):
    b = s.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def mp_arr(items):
    assert len(items) < 16
    return bytes([0x90 | len(items)]) + b"".join(items)


def mp_arr16(items):
    return b"\xdc" + struct.pack(">H", len(items)) + b"".join(items)


def mp_val(v):
    if v is None:
        return b"\xc0"
    if isinstance(v, str):
        return mp_str(v)
    if isinstance(v, int):
        return mp_int(v)
    if isinstance(v, list):
        items = [mp_val(x) for x in v]
        return mp_arr(items) if len(items) < 16 else mp_arr16(items)
    raise TypeError(v)


def sglang_batch(ts, events, rank):
    return b"\x93\xcb" + struct.pack(">d", ts) + mp_arr([mp_val(e) for e in events]) + mp_int(rank)


def main():
    upstream = None
    if "--upstream" in sys.argv:
        upstream = load_upstream(sys.argv[sys.argv.index("--upstream") + 1])
    out = {"contract": "sha256_sglang", "cases": []}
    failed = False
    for name, tokens, ps in CASES:
        digs = page_digests(tokens, ps)
        keys = [event_key(d) for d in digs]
        if name in CHECK and keys != CHECK[name]:
            print(f"check {name}: {keys} != {CHECK[name]}", file=sys.stderr)
            failed = True
        if upstream is not None:
            up = upstream_keys(upstream, tokens, ps)
            if up != keys:
                print(f"upstream {name}: {up} != {keys}", file=sys.stderr)
                failed = True
        out["cases"].append({
            "name": name, "page_size": ps, "tokens": tokens,
            "pages": [{"digest": d.hex(), "int64": k} for d, k in zip(digs, keys)],
        })
    # One step of a radix cache that stored tokens 1..48 (page 16) as one
    # node, then evicted its last page, as ZmqEventPublisher sends it.
    k = out["cases"][0]["pages"]
    t = list(range(1, 49))
    events = [
        ["BlockStored", [k[0]["int64"]], None, t[0:16], 16, None, "GPU"],
        ["BlockStored", [k[1]["int64"]], k[0]["int64"], t[16:32], 16, None, "GPU"],
        ["BlockStored", [k[2]["int64"]], k[1]["int64"], t[32:48], 16, None, "GPU"],
        ["BlockRemoved", [k[2]["int64"]], "GPU"],
        ["AllBlocksCleared"],
    ]
    out["batch"] = {"ts": 1767225600.5, "dp_rank": 2, "seq": 7, "hex": sglang_batch(1767225600.5, events, 2).hex()}
    out["upstream_checked"] = upstream is not None
    json.dump(out, sys.stdout, indent=1)
    print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
