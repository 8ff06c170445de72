"""Load: 64 concurrent clients x 10 requests each (streaming and not) against one server, two
rounds. Every request succeeds, the queues drain to zero with every KV block free, and the
resident memory after the second round is within 5% of that after the first (no leak per
request)."""
import concurrent.futures
import json
import time

import openai
import pytest

from conftest import MODEL_NAME, Server

CLIENTS = 64
REQUESTS_PER_CLIENT = 10


def one_client(base_url, client_id):
    cl = openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0, timeout=600)
    done = 0
    for k in range(REQUESTS_PER_CLIENT):
        prompt = f"Request {k} of client {client_id}: tell me about the number {client_id * 7 + k}."
        max_tokens = 8 + (client_id + k) % 9
        if (client_id + k) % 2:
            stream = cl.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens,
                                           temperature=0.8, seed=client_id * 100 + k, stream=True,
                                           extra_body={"ignore_eos": True})
            finish = [c.choices[0].finish_reason for c in stream if c.choices]
            assert finish[-1] == "length" and all(f is None for f in finish[:-1])
        else:
            r = cl.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens,
                                      temperature=0.8, seed=client_id * 100 + k,
                                      extra_body={"ignore_eos": True})
            assert r.usage.completion_tokens == max_tokens
        done += 1
    return done


def run_round(server):
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda i: one_client(server.base_url, i), range(CLIENTS)))
    assert results == [REQUESTS_PER_CLIENT] * CLIENTS
    return time.time() - t0


def wait_drained(server, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if (m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
                and m["octet:kv_cache_num_free_blocks"] == m["octet:kv_cache_num_blocks"]):
            return m
        time.sleep(0.1)
    raise AssertionError("queues did not drain: %s" % server.metrics())


@pytest.mark.load
def test_64_clients_x_10_requests_two_rounds():
    s = Server("--max-num-seqs", "64")
    try:
        t1 = run_round(s)
        m1 = wait_drained(s)
        rss1 = s.rss_bytes()
        t2 = run_round(s)
        m2 = wait_drained(s)
        rss2 = s.rss_bytes()
        n = CLIENTS * REQUESTS_PER_CLIENT
        ok = lambda m: sum(v for k, v in m.items() if k.startswith("vllm:request_success_total")
                           and "abort" not in k)
        assert ok(m1) == n and ok(m2) == 2 * n
        assert m2['vllm:request_success_total{finished_reason="abort"}'] == 0
        print(json.dumps({"round1_s": round(t1, 1), "round2_s": round(t2, 1),
                          "rss1_MiB": rss1 >> 20, "rss2_MiB": rss2 >> 20}))
        assert abs(rss2 - rss1) <= 0.05 * rss1, (rss1, rss2)
    finally:
        assert s.stop() == 0
