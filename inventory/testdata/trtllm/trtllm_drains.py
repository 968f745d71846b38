#!/usr/bin/env python3
"""TensorRT-LLM /kv_cache_events bodies for llb's drain tests.

Standard library only. Each file is the exact bytes trtllm-serve answers to
POST /kv_cache_events, built the way its source builds them:

  * tensorrt_llm/serve/openai_server.py get_kv_cache_events: the events of
    generator.get_kv_cache_events_async(2), appended in order, returned as
    JSONResponse(content=events);
  * every event is tensorrt_llm._utils.KVCacheEventSerializer.to_json_str(e):
    {"event_id", "data", "window_size"} plus "attention_dp_rank" when the
    event has one; data by type (created: num_blocks_per_cache_level;
    stored: parent_hash, blocks of {type "stored_block", block_hash,
    tokens of {type "unique_token", token_id, token_extra_id}, cache_level,
    priority}; removed: block_hashes; updated: block_hash and the
    event_diff objects of cache_level and priority), keys in that order;
  * Starlette's JSONResponse.render: json.dumps(content, ensure_ascii=False,
    allow_nan=False, indent=None, separators=(",", ":")).

Only the serializer's field layout is reproduced (no TensorRT-LLM code is
copied or imported). The block hashes are stand-ins: TensorRT-LLM's own are
an internal 64-bit value (size_t) that llb never recomputes, only uses as a
handle, so any stable 64-bit values do; some exceed 2**63 as real ones do.
tokens_per_block is 32, TensorRT-LLM's default; window_size 4096.

Usage: python3 trtllm_drains.py   (writes the *.json files beside it)
"""

import hashlib
import json
import os
import struct

BS = 32
WINDOW = 4096


def block_hash(parent, tokens):
    """A stand-in 64-bit engine hash of a block (chained on its parent)."""
    h = hashlib.sha256(struct.pack("<Q", parent or 0) + b"".join(struct.pack("<I", t) for t in tokens))
    return struct.unpack("<Q", h.digest()[:8])[0]


def token(t, extra=0):
    return {"type": "unique_token", "token_id": t, "token_extra_id": extra}


def stored_block(h, toks, extra=0, level=0, priority=35):
    return {"type": "stored_block", "block_hash": h, "tokens": [token(t, extra) for t in toks],
            "cache_level": level, "priority": priority}


def event(event_id, data, rank=None):
    e = {"event_id": event_id, "data": data, "window_size": WINDOW}
    if rank is not None:
        e["attention_dp_rank"] = rank
    return e


def chain(tokens, parent=None):
    """Engine hashes of the blocks of tokens (full or partial)."""
    out = []
    for i in range(0, len(tokens), BS):
        parent = block_hash(parent, tokens[i:i + BS])
        out.append(parent)
    return out


def render(content):
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    files = {}

    # A fresh engine's first drain: created; a prompt of 74 tokens stored as
    # two full blocks and a partial one; a second prompt sharing the first
    # block, stored as a child run; the child evicted; a block moved to host
    # memory; a multimodal block.
    p1 = list(range(1, 75))                       # 2 full blocks + 10 tokens
    h1 = chain(p1)
    p2 = p1[:32] + list(range(500, 532))          # shares block 0
    h2 = chain(p2[32:], h1[0])
    mm = list(range(900, 932))
    hmm = chain(mm)
    files["drain-fresh.json"] = [
        event(0, {"type": "created", "num_blocks_per_cache_level": [2231, 0]}),
        event(1, {"type": "stored", "parent_hash": None,
                  "blocks": [stored_block(h1[0], p1[0:32]), stored_block(h1[1], p1[32:64]), stored_block(h1[2], p1[64:74])]}),
        event(2, {"type": "stored", "parent_hash": h1[0], "blocks": [stored_block(h2[0], p2[32:64])]}),
        event(3, {"type": "removed", "block_hashes": [h2[0]]}),
        event(4, {"type": "updated", "block_hash": h1[1],
                  "cache_level": {"type": "event_diff", "new_value": 1, "old_value": 0},
                  "priority": {"type": "event_diff", "new_value": 35, "old_value": 35}}),
        event(5, {"type": "stored", "parent_hash": None, "blocks": [stored_block(hmm[0], mm, extra=7)]}),
    ]

    # The next drain after another consumer took event_ids 6..9: the gap
    # shows, and a new prompt is stored.
    p3 = list(range(2000, 2064))
    h3 = chain(p3)
    files["drain-after-theft.json"] = [
        event(10, {"type": "stored", "parent_hash": None,
                   "blocks": [stored_block(h3[0], p3[0:32]), stored_block(h3[1], p3[32:64])]}),
    ]

    # Attention data parallelism: each rank counts its own event_ids.
    p4 = list(range(3000, 3032))
    p5 = list(range(4000, 4032))
    files["drain-adp.json"] = [
        event(0, {"type": "created", "num_blocks_per_cache_level": [1024, 0]}, rank=0),
        event(0, {"type": "created", "num_blocks_per_cache_level": [1024, 0]}, rank=1),
        event(1, {"type": "stored", "parent_hash": None, "blocks": [stored_block(chain(p4)[0], p4)]}, rank=0),
        event(1, {"type": "stored", "parent_hash": None, "blocks": [stored_block(chain(p5)[0], p5)]}, rank=1),
        event(2, {"type": "removed", "block_hashes": [chain(p4)[0]]}, rank=0),
    ]

    # An engine whose tokens_per_block is 64 (the rule says 32).
    p6 = list(range(5000, 5128))
    files["drain-blocksize64.json"] = [
        event(0, {"type": "stored", "parent_hash": None,
                  "blocks": [stored_block(block_hash(None, p6[:64]), p6[:64]), stored_block(block_hash(7, p6[64:]), p6[64:])]}),
    ]

    for name, content in files.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(render(content))


if __name__ == "__main__":
    main()
