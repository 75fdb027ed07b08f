"""What a simulated engine remembers between requests (its prefix cache, device and HiCache host
tiers) and how it answers a chat completion (deterministically at temperature 0)."""

from __future__ import annotations

import hashlib
import random
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]|\s+")
DEVICE_SEQUENCES = 4  # prompts the device pool holds before the oldest moves to the host tier
HOST_SEQUENCES = 256

_VOCAB = (
    "the long context tier keeps the prefix cache warm so the follow up turn reuses the "
    "first turn and the replica answers quickly while the other one restarts on gpu02"
).split()


def render_prompt(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|>\n{content}")
    return "[gMASK]<sop>" + "".join(parts) + "<|assistant|>"


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class CacheLookup:
    cached_tokens: int
    host_hit_tokens: int


@dataclass
class PrefixCache:
    hicache: bool
    device: OrderedDict[tuple[str, ...], None] = field(default_factory=OrderedDict)
    host: OrderedDict[tuple[str, ...], None] = field(default_factory=OrderedDict)

    def match(self, tokens: list[str]) -> CacheLookup:
        seq = tuple(tokens)
        best_device = max((_common_prefix(seq, s) for s in self.device), default=0)
        best_host = max((_common_prefix(seq, s) for s in self.host), default=0) if self.hicache else 0
        cached = max(best_device, best_host)
        # the engine never reports the whole prompt as cached: the last token is always computed
        cached = min(cached, max(len(seq) - 1, 0))
        return CacheLookup(cached_tokens=cached, host_hit_tokens=max(0, min(best_host, cached) - best_device))

    def insert(self, tokens: list[str]) -> None:
        seq = tuple(tokens)
        self.device.pop(seq, None)
        self.device[seq] = None
        while len(self.device) > DEVICE_SEQUENCES:
            evicted, _ = self.device.popitem(last=False)
            if self.hicache:
                self.host.pop(evicted, None)
                self.host[evicted] = None
                while len(self.host) > HOST_SEQUENCES:
                    self.host.popitem(last=False)


@dataclass
class EngineCounters:
    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    host_hit_tokens: int = 0


def completion_text(prompt: str, max_tokens: int, temperature: float, rng: random.Random) -> list[str]:
    digest = hashlib.sha256(prompt.encode()).digest()
    n = max(1, min(max_tokens, 8 + digest[0] % 24))
    words = []
    for i in range(n):
        if temperature > 0 and rng.random() < min(temperature, 1.0) * 0.5:
            words.append(rng.choice(_VOCAB))
        else:
            words.append(_VOCAB[digest[i % len(digest)] % len(_VOCAB)])
    return words


def chat_completion_body(
    *,
    model: str,
    prompt_tokens: int,
    cached_tokens: int,
    words: list[str],
    max_tokens: int,
    created: int,
    request_id: str,
) -> dict[str, Any]:
    content = " ".join(words)
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": "length" if len(words) >= max_tokens else "stop",
                "matched_stop": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words),
            "total_tokens": prompt_tokens + len(words),
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }
