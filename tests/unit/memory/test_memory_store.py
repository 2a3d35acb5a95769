"""The memory store on a real LanceDB folder, with the real offline embedder and
the OpenAI-compatible one against the scripted ``/v1/embeddings`` server.

Offline-embedder tests are skipped where the ``local`` extra is not installed,
unless CROW_REQUIRE_LOCAL=1 (as .ci/run sets it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from crow.memory.embedders import EmbedderUnavailable, MiniLMEmbedder, OpenAIEmbedder
from crow.memory.minilm import installed as offline_installed
from crow.memory.scopes import MemoryError, MemoryPlace, project_root
from crow.memory.store import MemoryStore

needs_offline = pytest.mark.skipif(
    not offline_installed() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra (the offline embedder's files) is not installed",
)
_OFFLINE = MiniLMEmbedder()  # one load for the module's tests


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "memory"


def texts(hits) -> list[str]:
    return [h.memory.text for h in hits]


# ---- the offline embedder ---------------------------------------------------------


@needs_offline
@pytest.mark.parametrize(
    ("a", "b", "published"),
    [  # all-MiniLM-L6-v2's scores as sentence-transformers documents them (float weights)
        ("The new movie is awesome", "The new movie is so great", 0.8939),
        ("The cat sits outside", "The cat plays in the garden", 0.6788),
        ("I love pasta", "Do you like pizza?", 0.5096),
        ("A man is eating food.", "A man is eating a piece of bread.", 0.7553),
    ],
)
def test_the_offline_embedder_matches_the_published_model(a, b, published):
    vectors = _OFFLINE.embed([a, b])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # the float weights: the published figures, to their four decimals
    assert float(vectors[0] @ vectors[1]) == pytest.approx(published, abs=6e-5)


@needs_offline
def test_a_batch_embeds_each_text_as_alone():
    batch = _OFFLINE.embed(["short", "a much longer sentence that needs padding in a batch"])
    alone = _OFFLINE.embed(["short"])
    assert np.allclose(batch[0], alone[0], atol=1e-5)


# ---- remembering and recalling ----------------------------------------------------


@needs_offline
def test_recall_finds_a_paraphrase_first(folder):
    store = MemoryStore(folder, _OFFLINE)
    store.remember("The user prefers tabs for indentation in Python files.", tags=["style"])
    store.remember("Deployments go through the staging-3 host before production.")
    store.remember("The database for tests is called crow_test on port 5433.")
    found = store.recall("how should I indent code?")
    assert found.mode == "hybrid" and found.note is None
    assert found.hits[0].memory.text.startswith("The user prefers tabs")
    assert found.hits[0].similarity is not None and found.hits[0].similarity > 0.3
    assert found.hits[0].score >= found.hits[-1].score


@needs_offline
def test_scopes_and_tags_filter_what_is_recalled(folder):
    store = MemoryStore(folder, _OFFLINE)
    store.remember("Run the tests with pytest -n 2.", scope="project:/a", tags=["testing"])
    store.remember("Run the tests with make check.", scope="project:/b", tags=["testing"])
    store.remember("The user likes short answers.", scope="global", tags=["preference"])
    in_a = store.recall("how do I run the tests", scopes=["global", "project:/a"])
    assert "Run the tests with make check." not in texts(in_a.hits)
    assert "Run the tests with pytest -n 2." in texts(in_a.hits)
    tagged = store.recall("answers tests", tags=["preference"])
    assert texts(tagged.hits) == ["The user likes short answers."]
    assert store.recall("tests", scopes=[]).hits == []


@needs_offline
def test_a_near_duplicate_in_the_same_scope_is_merged(folder):
    store = MemoryStore(folder, _OFFLINE)
    first = store.remember("The user prefers tabs for indentation.", tags=["style"])
    again = store.remember("The user prefers tabs for indentation!", tags=["python"])
    assert again.merged_into == first.id and again.id == first.id
    assert again.replaced_text == "The user prefers tabs for indentation."
    [memory] = store.list_memories()
    assert memory.text == "The user prefers tabs for indentation!"
    assert memory.tags == ("style", "python")
    other_scope = store.remember("The user prefers tabs for indentation.", scope="project:/x")
    assert other_scope.merged_into is None
    different = store.remember("The CI runs on two cores with 24 GB of memory.")
    assert different.merged_into is None
    assert len(store.list_memories(scopes=None)) == 3


def test_without_an_embedder_memory_works_on_full_text(folder):
    store = MemoryStore(folder, None)
    store.remember("Deployments go through the staging-3 host.")
    again = store.remember("deployments go through the  staging-3 host")  # same words: merged
    assert again.merged_into is not None
    store.remember("The user likes short answers.")
    found = store.recall("which host do deployments use?")
    assert found.mode == "text"
    assert found.note is not None and "text only" in found.note
    assert texts(found.hits)[0] == "deployments go through the  staging-3 host"
    assert found.hits[0].text_score is not None and found.hits[0].similarity is None
    assert store.recall("?!").hits == []  # punctuation alone is no query, and no error


def test_forget_get_list_and_bad_ids(folder):
    store = MemoryStore(folder, None)
    ids = [store.remember(f"fact number {n} about the project").id for n in range(5)]
    assert [m.id for m in store.list_memories(limit=2, offset=1)] == [
        m.id for m in store.list_memories()
    ][1:3]
    gone = store.forget(ids[0])
    assert gone is not None and gone.text == "fact number 0 about the project"
    assert store.forget(ids[0]) is None
    assert store.get(ids[0]) is None and store.get(ids[1]) is not None
    with pytest.raises(MemoryError, match="not a memory id"):
        store.forget("x' OR '1'='1")
    with pytest.raises(MemoryError, match="nothing to remember"):
        store.remember("   ")
    with pytest.raises(MemoryError, match="unknown scope"):
        store.remember("a fact", scope="team")
    assert len(store.list_memories()) == 4


def test_quotes_in_scopes_and_tags_are_data_not_sql(folder):
    store = MemoryStore(folder, None)
    store.remember("it's quoted", scope="project:/tmp/o'brien", tags=["it's"])
    assert texts(store.recall("quoted", scopes=["project:/tmp/o'brien"]).hits) == ["it's quoted"]
    assert texts(store.recall("quoted", tags=["it's"]).hits) == ["it's quoted"]
    assert store.recall("quoted", scopes=["global"]).hits == []


def test_recalled_memories_get_a_stamp(folder):
    store = MemoryStore(folder, None)
    memory_id = store.remember("the staging host is staging-3").id
    assert store.get(memory_id).recalled is None
    store.mark_recalled([memory_id, "not-an-id"])
    assert store.get(memory_id).recalled is not None


# ---- embedders change, and fail ---------------------------------------------------


def test_the_openai_embedder_against_a_scripted_server(folder, scripted_model):
    embedder = OpenAIEmbedder(scripted_model.base_url, "nomic-embed-text")
    store = MemoryStore(folder, embedder)
    store.remember("deployments use the staging host")
    store.remember("the user likes short answers")
    found = store.recall("staging host deployments")
    assert found.mode == "hybrid"
    assert found.hits[0].memory.text == "deployments use the staging host"
    assert found.hits[0].similarity > 0.8  # 3 of its 5 words
    assert scripted_model.embedded[-1] == "staging host deployments"
    assert store.recorded_embedder() == "openai:nomic-embed-text"


def test_an_embedder_that_is_down_leaves_text_search_and_loses_no_write(folder, scripted_model):
    store = MemoryStore(folder, OpenAIEmbedder(scripted_model.base_url, "nomic-embed-text"))
    store.remember("deployments use the staging host")
    scripted_model.embedding_status = 503
    written = store.remember("the user likes short answers")  # stored without a vector
    found = store.recall("short answers")
    assert found.mode == "text" and "unavailable" in (found.note or "")
    assert texts(found.hits) == ["the user likes short answers"]
    assert store.get(written.id) is not None
    scripted_model.embedding_status = 200
    assert store.reindex() == 2  # the missing vector comes back with a reindex
    store._down_until = 0.0
    assert store.recall("short answers").mode == "hybrid"


def test_unreachable_embedder_raises_unavailable():
    embedder = OpenAIEmbedder("http://127.0.0.1:9/v1", "nomic-embed-text")
    with pytest.raises(EmbedderUnavailable, match=r"127\.0\.0\.1:9"):
        embedder.embed(["x"])


@needs_offline
def test_changing_the_embedder_never_mixes_vectors_until_reindex(folder, scripted_model):
    old = MemoryStore(folder, OpenAIEmbedder(scripted_model.base_url, "nomic-embed-text"))
    old.remember("The user prefers tabs for indentation.")
    old.remember("Deployments go through the staging-3 host.")
    new = MemoryStore(folder, _OFFLINE)
    found = new.recall("how should I indent code?")
    assert found.mode == "text" and "crow memory reindex" in (found.note or "")
    new.remember("The test database listens on port 5433.")  # kept, without a vector
    progress: list[tuple[int, int]] = []
    assert new.reindex(lambda done, total: progress.append((done, total))) == 3
    assert progress[-1] == (3, 3)
    assert new.recorded_embedder() == MiniLMEmbedder.name == "offline:all-MiniLM-L6-v2"
    after = new.recall("how should I indent code?")
    assert after.mode == "hybrid"
    assert after.hits[0].memory.text == "The user prefers tabs for indentation."
    assert new.stats()["with_vectors"] == 3


def test_a_reindex_to_no_embedder_keeps_every_memory(folder, scripted_model):
    MemoryStore(folder, OpenAIEmbedder(scripted_model.base_url, "nomic-embed-text")).remember(
        "deployments use the staging host"
    )
    store = MemoryStore(folder, None)  # [memory] embedder = none, then crow memory reindex
    assert store.reindex() == 1
    assert store.recorded_embedder() == ""
    assert texts(store.recall("staging host").hits) == ["deployments use the staging host"]


def test_an_empty_store_takes_the_new_embedder_without_a_reindex(folder, scripted_model):
    MemoryStore(folder, None).remember("x")  # made without vectors
    store = MemoryStore(folder, None)
    store.forget(store.list_memories()[0].id)
    store = MemoryStore(folder, OpenAIEmbedder(scripted_model.base_url, "nomic-embed-text"))
    store.remember("deployments use the staging host")
    assert store.recorded_embedder() == "openai:nomic-embed-text"
    assert store.recall("staging host").mode == "hybrid"


# ---- moving memories, and sharing a store -----------------------------------------


def test_export_then_import_keeps_ids_times_and_tags(folder, tmp_path):
    store = MemoryStore(folder, None)
    store.remember("the staging host is staging-3", tags=["deploy"], session="s1")
    store.remember("the user likes short answers", scope="project:/p")
    exported = list(store.export())
    other = MemoryStore(tmp_path / "other", None)
    for record in exported:
        other.remember(
            record["text"],
            scope=record["scope"],
            tags=record["tags"],
            session=record["session"] or "",
            memory_id=record["id"],
        )
    assert sorted(m.id for m in other.list_memories(scopes=None)) == sorted(
        r["id"] for r in exported
    )
    assert {m.scope for m in other.list_memories()} == {"global", "project:/p"}


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from crow.memory.store import MemoryStore
    store = MemoryStore(Path(sys.argv[1]), None)
    for n in range(int(sys.argv[3])):
        store.remember(f"{sys.argv[2]} wrote fact number {n} of its own", tags=[sys.argv[2]])
    print(len(store.list_memories(limit=10_000)))
    """
)


def test_two_processes_writing_at_once_lose_nothing(folder):
    MemoryStore(folder, None).remember("made before the writers start")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder), name, "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        assert int(out) >= 26  # each saw at least its own writes and the first memory
    store = MemoryStore(folder, None)
    assert len(store.list_memories(limit=1000)) == 51
    assert len(store.list_memories(tags=["alpha"], limit=1000)) == 25
    assert len(store.list_memories(tags=["beta"], limit=1000)) == 25


def test_a_reader_sees_what_another_process_committed(folder):
    reader = MemoryStore(folder, None)
    assert reader.recall("committed").hits == []
    code = "import sys; from pathlib import Path; from crow.memory.store import MemoryStore; "
    code += "MemoryStore(Path(sys.argv[1]), None).remember('committed by another process')"
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, timeout=60)
    assert texts(reader.recall("committed").hits) == ["committed by another process"]


# ---- scopes -----------------------------------------------------------------------


def test_a_place_resolves_scopes(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "pkg").mkdir(parents=True)
    assert project_root(repo / "src" / "pkg") == repo
    place = MemoryPlace(repo / "src", "sess_1")
    assert place.scope("project") == f"project:{repo}"
    assert place.scope("session") == "session:sess_1"
    assert place.visible() == ["global", f"project:{repo}", "session:sess_1"]
    assert place.scopes("all") is None
    assert place.scopes("global") == ["global"]
    with pytest.raises(MemoryError, match="no session"):
        MemoryPlace(repo).scope("session")
    for bad in ("team", "all"):
        with pytest.raises(MemoryError):
            place.scope(bad)


def test_the_store_folder_is_private(tmp_path):
    folder = tmp_path / "memory"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    MemoryStore(folder, None).remember("a private fact")
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_writer_killed_mid_write_leaves_a_usable_store(folder):
    import signal
    import time

    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder), "doomed", "400"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until it has written some, then mid-stream
        if (folder / "memories.lance" / "_versions").is_dir() and len(
            list((folder / "memories.lance" / "_versions").iterdir())
        ) > 5:
            break
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=10)
    store = MemoryStore(folder, None)
    kept = store.list_memories(limit=1000)
    assert 0 < len(kept) < 400
    assert store.recall("doomed wrote fact").hits
    assert store.remember("written after the crash").merged_into is None
    assert len(store.list_memories(limit=1000)) == len(kept) + 1


def test_a_store_makes_the_table_only_under_the_making_lock(tmp_path):
    """While another process holds the lock (it is making the table), a first write
    waits, and lands once the lock is let go: two stores never both create it."""
    import fcntl
    import threading

    from crow.memory import has_memories
    from crow.memory.commits import MAKING_LOCK

    folder = tmp_path / "memory"
    store = MemoryStore(folder, None)
    assert store.db is not None  # LanceDB imported and the folder made, before the lock
    with open(folder / MAKING_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        writer = threading.Thread(target=store.remember, args=("a fact made under the lock",))
        writer.start()
        writer.join(timeout=2.0)  # an unlocked first write takes milliseconds
        assert writer.is_alive() and not has_memories(folder)
    writer.join(timeout=30)
    assert [m.text for m in store.all()] == ["a fact made under the lock"]


def test_writers_racing_to_make_the_store_all_land(tmp_path):
    """Stores of their own (as separate processes have) writing their first memory
    at once: LanceDB refuses all but one of the racing index creations ("Retryable
    commit conflict"); each refused write is done again, and none is lost."""
    import threading

    for round_ in range(8):
        folder = tmp_path / f"round-{round_}"
        stores = [MemoryStore(folder, None) for _ in range(4)]
        start = threading.Barrier(len(stores))
        errors: list[BaseException] = []

        def write(
            store: MemoryStore, n: int, start: threading.Barrier, errors: list[BaseException]
        ) -> None:
            start.wait()
            try:
                store.remember(f"writer {n} keeps its own fact", scope="global")
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=(s, n, start, errors)) for n, s in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(MemoryStore(folder, None).all()) == len(stores)


def test_a_memory_over_the_size_limit_is_refused(tmp_path):
    store = MemoryStore(tmp_path / "m", None, max_text_bytes=1024)
    with pytest.raises(
        MemoryError, match=r"2 KiB, over the 1 KiB limit \(\[memory\] max_text_kib\)"
    ):
        store.remember("x" * 2048)
    assert store.remember("a short fact").id.startswith("mem_")
