"""Corpus loading, batching, validation split and the recall task."""
import numpy as np
import pytest

from models.data import (DataError, RecallTask, TextData, load_text_file, make_data,
                         stdlib_corpus, unigram_entropy)


def test_stdlib_corpus_is_text_and_deterministic():
    a = stdlib_corpus(("textwrap", "string", "no_such_module_xyz"))
    assert a == stdlib_corpus(("textwrap", "string"))   # missing modules are skipped
    assert b"def " in a


def test_missing_empty_and_binary_files(tmp_path):
    with pytest.raises(DataError, match="not found: .*nope.txt"):
        load_text_file(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="empty.txt is empty"):
        load_text_file(tmp_path / "empty.txt")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 10)
    with pytest.raises(DataError, match="binary"):
        load_text_file(tmp_path / "blob.bin")
    (tmp_path / "ok.txt").write_text("héllo\n" * 10)
    assert load_text_file(tmp_path / "ok.txt").startswith("héllo".encode())


def test_too_short_corpus():
    with pytest.raises(DataError, match="too short for seq_len 64"):
        TextData(b"abc" * 10, batch=2, seq_len=64, seed=0)


def test_text_batches_are_contiguous_streams_and_seeded():
    corpus = (np.arange(5000) % 251).astype(np.uint8).tobytes()
    d1 = TextData(corpus, batch=3, seq_len=16, seed=7)
    d2 = TextData(corpus, batch=3, seq_len=16, seed=7)
    b1, b2 = d1.next_batch(), d1.next_batch()
    assert b1.shape == (3, 17)
    np.testing.assert_array_equal(b1, d2.next_batch())
    np.testing.assert_array_equal(b1[:, -1], b2[:, 0])   # streams continue chunk to chunk
    assert len(d1.val) == 500 and d1.train[-1] == corpus[4499]


def test_state_restores_the_stream():
    d = TextData(bytes(range(200)) * 30, batch=2, seq_len=8, seed=0)
    for _ in range(5):
        d.next_batch()
    saved = d.state()
    want = [d.next_batch() for _ in range(3)]
    e = TextData(bytes(range(200)) * 30, batch=2, seq_len=8, seed=123)
    e.set_state(saved)
    for w in want:
        np.testing.assert_array_equal(e.next_batch(), w)


def test_val_batches_cover_the_split_in_order():
    d = TextData(bytes(range(256)) * 40, batch=4, seq_len=16, seed=0)
    chunks = list(d.val_batches())
    assert chunks and all(c.shape[1] == 17 for c in chunks)
    np.testing.assert_array_equal(chunks[0][:, -1], chunks[1][:, 0])
    assert len(list(d.val_batches(2))) == 2


def test_unigram_entropy():
    assert unigram_entropy(np.zeros(10, int)) == 0.0
    assert unigram_entropy(np.arange(256)) == pytest.approx(np.log(256))


def test_recall_layout():
    task = RecallTask(batch=3, seq_len=64, seed=0, pairs=4)
    toks = task.next_batch()
    mask = task.answer_mask()
    for row, m in zip(toks, mask):
        pairs = dict(zip(row[0:8:2], row[1:8:2]))
        assert len(pairs) == 4 and all(k < 64 <= v < 128 for k, v in pairs.items())
        # at every answer position the input is a key and the next token is its value
        for pos in np.flatnonzero(m):
            assert row[pos + 1] == pairs[row[pos]]
    assert task.min_distance > 32
    perfect = np.eye(256)[toks[:, 1:]]
    assert RecallTask.accuracy(perfect, toks, mask) == 1.0
    with pytest.raises(DataError, match="too short"):
        RecallTask(batch=1, seq_len=10, seed=0, pairs=8)


def test_make_data(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("some text " * 100)
    assert isinstance(make_data("text", 2, 8, 0, str(f)), TextData)
    assert isinstance(make_data("recall", 2, 64, 0), RecallTask)
    with pytest.raises(DataError, match="unknown task"):
        make_data("vision", 2, 8, 0)
