"""ADBench's file formats: what the generator writes, the reader reads back exactly."""
import numpy as np

from models.bench.adbench import generate, io


def assert_same(a, b):
    assert type(a) is type(b)
    for name, value in vars(a).items():
        np.testing.assert_array_equal(value, getattr(b, name), err_msg=name)


def test_gmm_round_trip(tmp_path):
    inp = generate.gmm(3, 4, 7, seed=1, gamma=2.5, m=3)
    io.write_gmm(tmp_path / "gmm.txt", inp)
    assert_same(io.read_gmm(tmp_path / "gmm.txt"), inp)


def test_gmm_replicate_point_mode(tmp_path):
    # the 2.5M files hold a single point, replicated N times
    (tmp_path / "gmm.txt").write_text("2 1 4\n0.5\n1 2\n0.1 0.2 0.3\n7 8\n1.0 0\n")
    inp = io.read_gmm(tmp_path / "gmm.txt")
    np.testing.assert_array_equal(inp.x, [[7, 8]] * 4)
    assert (inp.gamma, inp.m) == (1.0, 0)


def test_lstm_round_trip(tmp_path):
    inp = generate.lstm(2, 9, b=5, seed=2)
    io.write_lstm(tmp_path / "lstm.txt", inp)
    assert_same(io.read_lstm(tmp_path / "lstm.txt"), inp)


def test_ba_one_of_each_round_trip_and_replication(tmp_path):
    io.write_ba(tmp_path / "ba.txt", 3, 4, 10, *generate.ba_one_of_each(seed=3))
    inp = io.read_ba(tmp_path / "ba.txt")
    assert_same(inp, generate.ba(3, 4, 10, seed=3))
    assert inp.sizes == {"n": 3, "m": 4, "p": 10}
    np.testing.assert_array_equal(inp.obs[:, 0], np.arange(10) % 3)   # camera i mod n
    np.testing.assert_array_equal(inp.obs[:, 1], np.arange(10) % 4)   # point i mod m


def test_generator_command_line_writes_readable_files(tmp_path):
    generate.main(["gmm", "--d", "2", "--K", "3", "--n", "5", str(tmp_path / "g.txt")])
    generate.main(["lstm", "--l", "1", "--c", "4", str(tmp_path / "l.txt")])
    generate.main(["ba", "--n", "2", "--m", "3", "--p", "6", str(tmp_path / "b.txt")])
    assert io.read_gmm(tmp_path / "g.txt").sizes == {"d": 2, "K": 3, "n": 5}
    assert io.read_lstm(tmp_path / "l.txt").sizes == {"l": 1, "c": 4, "b": 14}
    assert io.read_ba(tmp_path / "b.txt").sizes == {"n": 2, "m": 3, "p": 6}


def test_data_dir_honours_the_environment_and_reports_absence(tmp_path, monkeypatch):
    monkeypatch.setenv(io.ENV_VAR, str(tmp_path))
    assert io.data_dir() == tmp_path
    monkeypatch.setenv(io.ENV_VAR, str(tmp_path / "missing"))
    assert io.data_dir() is None
