"""Checkpoint format: round trip, atomic write, corrupt/truncated files, incompatible configs."""
import json
import os

import numpy as np
import pytest

from models.checkpoint import (CheckpointFileError, check_compatible, fill_tree, load_checkpoint,
                               save_checkpoint, tree_arrays)


def _write(path):
    arrays = {"params/w": np.arange(6.0).reshape(2, 3), "state/pos": np.asarray(5)}
    save_checkpoint(path, arrays, {"step": 7, "model": {"d_model": 3}})
    return arrays


def test_round_trip(tmp_path):
    path = tmp_path / "c.npz"
    arrays = _write(path)
    got, header = load_checkpoint(path)
    assert header["step"] == 7 and header["version"] == 1 and len(header["checksum"]) == 64
    np.testing.assert_array_equal(got["params/w"], arrays["params/w"])
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]   # no temporary file left


def test_pytree_paths_round_trip(tmp_path):
    tree = {"a": np.ones((2, 2), np.float32), "b": [np.zeros(3)], "pos": 4}
    path = tmp_path / "t.npz"
    save_checkpoint(path, tree_arrays(tree, "params", "p"), {})
    arrays, _ = load_checkpoint(path)
    back = fill_tree(tree, arrays, "params", "p", str(path))
    assert back["a"].dtype == np.float32 and back["pos"] == 4 and isinstance(back["pos"], int)
    with pytest.raises(CheckpointFileError, match="shape"):
        fill_tree({"a": np.ones(3), "b": [np.zeros(3)], "pos": 1}, arrays, "params", "p", "x")
    with pytest.raises(CheckpointFileError, match="no entry"):
        fill_tree({"c": np.ones(3)}, arrays, "params", "p", "x")


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c.npz"
    _write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match=r"c\.npz is truncated or corrupt"):
        load_checkpoint(path)


def test_flipped_byte_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, {"params/w": np.zeros(1000)}, {"step": 1})
    data = bytearray(path.read_bytes())
    i = data.find(b"\x00" * 64) + 32   # inside the zero array's bytes (stored uncompressed)
    data[i] = 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointFileError, match="c.npz"):
        load_checkpoint(path)


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, a=np.ones(2))
    with pytest.raises(CheckpointFileError, match="not a Hecate checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointFileError, match="not found"):
        load_checkpoint(tmp_path / "missing.npz")


def test_failed_write_keeps_the_old_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    _write(path)
    before = path.read_bytes()

    class Boom:   # np.savez fails half way through writing the archive
        shape = (1,)

        def __array__(self, *a, **k):
            raise RuntimeError("disk full")
    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"params/a": np.ones(1), "params/z": Boom()}, {})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.npz"]


def test_incompatible_config_names_the_fields(tmp_path):
    header = {"model": {"d_model": 64, "rule": "delta", "layers": 2}}
    check_compatible("c.npz", header, {"d_model": 64, "rule": "delta", "layers": 2})
    with pytest.raises(CheckpointFileError) as e:
        check_compatible("c.npz", header, {"d_model": 32, "rule": "titans", "layers": 2})
    msg = str(e.value)
    assert "d_model: 64 (checkpoint) vs 32 (this run)" in msg and "rule" in msg
    assert "layers" not in msg
    assert json.dumps(header)   # headers stay JSON
