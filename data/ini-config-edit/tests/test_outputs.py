"""Verifier for ini-config-edit: parsed values per section, plus byte-exact preservation of the rest."""
import configparser
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = "/app/conf/service.ini"


def parsed():
    parser = configparser.ConfigParser(interpolation=None)
    with open(PATH) as f:
        parser.read_file(f)
    return parser


def lines():
    with open(PATH) as f:
        return f.read().splitlines()


def test_server_section_values():
    server = parsed()["server"]
    assert server["port"] == "9090"
    assert server["workers"] == "4"
    assert server["host"] == "0.0.0.0" and server["keepalive"] == "75"


def test_database_pool_and_timeout_after_pool_size():
    db = parsed()["database"]
    assert db["pool_size"] == "20"
    assert db["timeout"] == "30"
    all_lines = lines()
    assert all_lines[all_lines.index("pool_size = 20") + 1] == "timeout = 30"


def test_logging_section_values():
    logging = parsed()["logging"]
    assert logging["level"] == "warning"
    assert logging["debug"] == "false"


def test_features_debug_and_commented_debug_untouched():
    assert parsed()["features"]["debug"] == "true"
    all_lines = lines()
    assert "# debug = true" in all_lines
    assert "; port = 9000 was tried in 2022 and clashed with the metrics agent" in all_lines
    # the changed file must differ from the original (doing nothing is not a pass here)
    with open(os.path.join(HERE, "original.ini")) as f:
        assert f.read().splitlines() != all_lines


def test_whole_file_matches_expected_exactly():
    with open(os.path.join(HERE, "expected.ini")) as f:
        want = f.read()
    with open(PATH) as f:
        assert f.read() == want
