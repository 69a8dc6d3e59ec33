"""`myriad serve` end to end (docs/serving.md): a trained tiny model served by the myriad-serve
program answers the `openai` client unchanged (completions, streaming, logprobs) with the greedy
tokens Engine.generate gives alone, also for many concurrent requests; seeded sampling is the same
whatever else runs; an INT8 export serves; SIGTERM drains (in-flight requests finish, new ones get
503, exit 0); 10,000 fuzzed request bodies get answers (never a crash); bad input is 400 naming
the field."""
import http.client
import json
import random
import signal
import threading
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor

import pytest

from myriad import int8
from serve_process import PROMPTS, Server, skip_reason, trained_gpt2

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    engine, checkpoint = trained_gpt2(root)
    return engine, checkpoint, root


@pytest.fixture(scope="module")
def server(trained):
    _, checkpoint, _ = trained
    s = Server("--checkpoint", checkpoint, "--model-name", "tiny", "--block-size", "8")
    yield s
    code, out, err = s.stop()
    assert code == 0, err


def greedy(engine, prompt, n):
    """Engine.generate's greedy ids, cut after the end-of-text token the server stops at."""
    eot = engine.tokenizer().eot_id
    out = engine.generate(prompt, n, temperature=0.0, top_k=0, details=True)
    ids = [int(i) for i in out["ids"]]
    if eot in ids:
        ids = ids[:ids.index(eot) + 1]
    return ids


def test_the_openai_client_gets_the_greedy_tokens_of_generate(trained, server):
    openai = pytest.importorskip("openai")
    engine, _, _ = trained
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    done = client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=12, temperature=0)
    choice = done.choices[0]
    assert choice.model_extra["token_ids"] == greedy(engine, PROMPTS[0], 12)[:len(choice.model_extra["token_ids"])]
    assert choice.finish_reason in ("length", "stop")
    assert done.usage.completion_tokens == len(choice.model_extra["token_ids"])
    # Streaming: the same text, piece by piece, ending with a finish reason.
    pieces, reasons = [], []
    for chunk in client.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=12, temperature=0,
                                           stream=True):
        pieces.append(chunk.choices[0].text)
        reasons.append(chunk.choices[0].finish_reason)
    assert "".join(pieces) == choice.text
    assert reasons[-1] == choice.finish_reason
    # Log-probabilities: one per token, with the requested alternatives.
    scored = client.completions.create(model="tiny", prompt=PROMPTS[1], max_tokens=5, temperature=0, logprobs=3)
    lp = scored.choices[0].logprobs
    assert len(lp.token_logprobs) == len(scored.choices[0].model_extra["token_ids"])
    assert all(len(alternatives) == 3 for alternatives in lp.top_logprobs)
    assert all(v <= 0.0 for v in lp.token_logprobs)
    # A refusal is the client's BadRequestError naming the field.
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model="tiny", prompt="x", max_tokens=-1)


def test_concurrent_requests_get_what_each_gets_alone(trained, server):
    engine, _, _ = trained
    bodies = [{"prompt": p, "max_tokens": 16, "temperature": 0} for p in PROMPTS * 3]
    bodies += [{"prompt": p, "max_tokens": 16, "temperature": 1.0, "top_k": 20, "seed": i}
               for i, p in enumerate(PROMPTS)]
    alone = [json.loads(server.post(b)[1])["choices"][0]["token_ids"] for b in bodies]
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        together = list(pool.map(lambda b: json.loads(server.post(b)[1])["choices"][0]["token_ids"], bodies))
    assert together == alone
    for body, ids in zip(bodies, alone):
        if body["temperature"] == 0:
            assert ids == greedy(engine, body["prompt"], 16)[:len(ids)], body
    metrics = server.get("/metrics")[1]
    batch = _metric_sums(metrics)
    assert batch["myriad_batch_sequences_sum"] / batch["myriad_batch_sequences_count"] > 1.0, metrics


def test_bad_requests_are_400_naming_the_field(server):
    for body, field in [({"prompt": "x", "max_tokens": -1}, "max_tokens"), ({"prompt": "x", "top_p": 2}, "top_p"),
                        ({"prompt": "x", "colour": 1}, "body"), ({"prompt": [1] * 65}, "prompt")]:
        status, text, _ = server.post(body)
        assert status == 400, (body, text)
        assert json.loads(text)["error"]["param"] == field
    status, text, _ = server.post(b"{not json")
    assert status == 400 and json.loads(text)["error"]["param"] == "body"


def test_fuzzed_bodies_never_crash_the_server(server):
    rng = random.Random(20261205)
    values = [None, True, False, 0, 1, -1, 2**40, -2**63, 1.5, -0.0, 1e308, "", "x", "\u00e9\U0001F600", [], [1, 2],
              [-1], [10**12], ["a"], ["a", "b"], {}, {"a": 1}, "the cat", 320, 319, 64]
    fields = ["model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "logprobs",
              "n", "echo", "best_of", "presence_penalty", "frequency_penalty", "bogus"]
    statuses = {}

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    for _ in range(10_000):
        kind = rng.random()
        if kind < 0.15:  # random bytes
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        elif kind < 0.3:  # a valid body cut or spliced
            text = json.dumps({"prompt": "the cat", "max_tokens": 2})
            cut = rng.randrange(len(text))
            body = (text[:cut] + rng.choice(["", "}", "\x00", "\"", "[", "9" * 40]) + text[cut + 1:]).encode()
        else:  # random fields with random values (max_tokens kept small when it is a valid number)
            obj = {f: rng.choice(values) for f in rng.sample(fields, rng.randrange(1, 6))}
            if rng.random() < 0.7:
                obj["prompt"] = rng.choice(["the", [1, 2, 3], "", [0]])
            if isinstance(obj.get("max_tokens"), int) and obj["max_tokens"] > 4:
                obj["max_tokens"] = 4
            obj["stream"] = False if obj.get("stream") is True and rng.random() < 0.8 else obj.get("stream", False)
            body = json.dumps(obj).encode()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        statuses[response.status] = statuses.get(response.status, 0) + 1
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.close()
    assert sum(statuses.values()) == 10_000
    assert set(statuses) <= {200, 400, 404}, statuses
    assert statuses.get(400, 0) > 1000 and statuses.get(200, 0) > 100, statuses
    assert server.process.poll() is None, "the server died"
    assert server.get("/health")[0] == 200


def test_an_int8_export_is_served(trained, tmp_path):
    _, checkpoint, _ = trained
    path = int8.export_int8(checkpoint, str(tmp_path / "tiny-int8.safetensors"))["path"]
    tokenizer = f"bpe:{checkpoint}/tokenizer.bpe"
    with Server("--int8", path, "--tokenizer", tokenizer) as s:
        status, text, _ = s.post({"prompt": PROMPTS[2], "max_tokens": 8, "temperature": 0})
        assert status == 200, text
        assert json.loads(s.get("/v1/models")[1])["data"][0]["id"] == "tiny-int8"
        ids = json.loads(text)["choices"][0]["token_ids"]
        assert 1 <= len(ids) <= 8
        code, _, err = s.stop()
        assert code == 0, err


def _metric_sums(metrics):
    """{metric name: its value summed over its labels} from the server's /metrics text."""
    sums = {}
    for line in metrics.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{")[0]
            sums[name] = sums.get(name, 0.0) + float(value)
    return sums


def test_sigterm_drains_in_flight_requests_and_exits_zero(trained):
    _, checkpoint, _ = trained
    with Server("--checkpoint", checkpoint, "--drain-seconds", "30", "--max-sequences", "1") as s:
        results, refused_at = [], []
        signalled = []  # the time SIGTERM was sent

        def ask(i):
            try:
                results.append(s.post({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 60, "temperature": 0.9,
                                       "seed": i}, timeout=60))
            except urllib.error.URLError as e:  # connecting after the drained server closed its socket
                results.append((None, f"{e} at {time.time()}", {}))
                refused_at.append(time.time())

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        # Signal once one request runs and another waits. A request still on its way then is
        # rightly refused (503, draining; or, once the drained server has exited, its connection);
        # every one the server held at the signal must finish.
        deadline = time.time() + 60
        while time.time() < deadline:
            m = _metric_sums(s.get("/metrics")[1])
            answered, queued, running = (int(m.get(name, 0)) for name in (
                "myriad_requests_total", "myriad_queue_depth", "myriad_running_sequences"))
            if queued >= 1 and running >= 1:
                break
            time.sleep(0.01)
        in_flight, held = queued + running, answered + queued + running
        signalled.append(time.time())
        s.process.send_signal(signal.SIGTERM)
        deadline = time.time() + 30  # the drain starts when the signal thread wakes (a loaded host: late)
        while s.get("/ready")[0] != 503 and time.time() < deadline:
            time.sleep(0.01)
        refused = s.post({"prompt": "x", "max_tokens": 1})
        assert refused[0] in (503,), refused
        assert refused[2].get("Retry-After") == "1"
        assert s.get("/ready")[0] == 503
        for t in threads:
            t.join(60)
        code, out, err = s.stop()
        assert code == 0, err
        assert "draining" in out and "0 requests cancelled" in out, out
        assert in_flight >= 2, "the signal was meant to arrive with requests queued and running"
        finished = [r for r in results if r[0] == 200]
        assert len(results) == 6 and len(finished) >= held, (held, results)
        assert all(r[0] == 503 and "draining" in r[1] for r in results if r[0] not in (200, None)), results
        assert all(t > signalled[0] for t in refused_at), (signalled, refused_at)  # never before the signal
        assert all(json.loads(r[1])["choices"][0]["finish_reason"] in ("length", "stop") for r in finished)
