"""options.json is checked against bilm-tf's schema: nothing coerced, every problem named at once, each at
its key (pydantic's location) with its value and pydantic's own words."""

import json

import pytest

from spacy_elmo.bilm.options import FILE_KEYS, OPTION_NAMES, BiLMOptions, OptionsError


@pytest.fixture
def write_options(fixture_dir, tmp_path):
    original = json.loads((fixture_dir / "options.json").read_text())

    def write(edit):
        options = json.loads(json.dumps(original))
        edit(options)
        path = tmp_path / "options.json"
        path.write_text(json.dumps(options))
        return path

    return write


def setter(section, key, value):
    def edit(options):
        options[section][key] = value

    return edit


@pytest.mark.parametrize(
    "section,key,value,expected",
    [
        ("lstm", "projection_dim", 128.9, "a valid integer"),
        ("lstm", "use_skip_connections", "false", "a valid boolean"),
        ("lstm", "dim", "abc", "a valid integer"),
        ("char_cnn", "n_highway", None, "a valid integer"),
        ("lstm", "projection_dim", [16, 16], "a valid integer"),
        ("lstm", "n_layers", True, "a valid integer"),
        ("lstm", "n_layers", 0, "greater than or equal to 1"),
        ("lstm", "cell_clip", "3", "a valid number"),
        ("lstm", "proj_clip", -1, "greater than or equal to 0"),
        ("char_cnn", "activation", "gelu", "'relu' or 'tanh'"),
        ("char_cnn", "n_characters", 300, "261 or 262"),
        ("char_cnn", "n_characters", 261.0, "is a float: expected the integer 261 or 262"),
    ],
)
def test_a_wrong_value_is_an_error_naming_the_file_and_key(write_options, section, key, value, expected):
    path = write_options(setter(section, key, value))
    with pytest.raises(OptionsError) as error:
        BiLMOptions.from_file(path)
    message = str(error.value)
    assert message.startswith(f"{path}: option '{section}.{key}' is {json.dumps(value)}: ")
    assert expected in message
    assert "\n" not in message and "Traceback" not in message


def test_a_wrong_filter_is_located_inside_the_list(write_options):
    path = write_options(setter("char_cnn", "filters", [[1, 4], [2, 4.5]]))
    with pytest.raises(OptionsError) as error:
        BiLMOptions.from_file(path)
    assert str(error.value) == f"{path}: option 'char_cnn.filters.1.1' is 4.5: Input should be a valid integer"


def test_every_problem_is_reported_at_once(write_options):
    def edit(options):
        options["lstm"]["dim"] = "abc"
        options["lstm"]["use_skip_connections"] = "false"
        del options["char_cnn"]["n_highway"]

    with pytest.raises(OptionsError) as error:
        BiLMOptions.from_file(write_options(edit))
    message = str(error.value)
    assert "3 problems" in message
    for part in (
        "option 'lstm.dim' is \"abc\"",
        "option 'lstm.use_skip_connections' is \"false\"",
        "missing option 'char_cnn.n_highway'",
    ):
        assert part in message


def test_integral_numbers_and_optional_keys(write_options):
    def edit(options):
        options["lstm"]["dim"] = float(options["lstm"]["dim"])  # 16.0 is 16
        del options["lstm"]["cell_clip"]
        options["lstm"]["proj_clip"] = None  # null: no clipping, as absent
        del options["lstm"]["use_skip_connections"]

    options = BiLMOptions.from_file(write_options(edit))
    assert isinstance(options.lstm_dim, int) and options.cell_clip is None and options.proj_clip is None
    assert options.use_skip_connections is False  # bilm-tf's default


def test_a_section_that_is_not_an_object(write_options):
    def edit(options):
        options["lstm"] = [1, 2]

    with pytest.raises(
        OptionsError, match=r"options.json: option 'lstm' is \[1, 2\]: Input should be a valid dictionary"
    ):
        BiLMOptions.from_file(write_options(edit))


def test_a_filter_wider_than_a_token_is_an_error_naming_the_file(write_options):
    path = write_options(setter("char_cnn", "filters", [[1, 4], [60, 4]]))
    with pytest.raises(OptionsError) as error:
        BiLMOptions.from_file(path)
    assert str(error.value) == f"{path}: option 'char_cnn.filters' has width 60 > max_characters_per_token"


def test_bilm_tf_keys_round_trip_and_dropout_is_checked(write_options):
    def edit(options):
        options["dropout"] = 0.1
        options["n_epochs"] = 10
        options["lstm"]["some_key"] = [1, 2]

    options = BiLMOptions.from_file(write_options(edit))
    written = options.to_dict()
    assert written["dropout"] == 0.1 and written["n_epochs"] == 10 and written["lstm"]["some_key"] == [1, 2]
    with pytest.raises(OptionsError, match=r"option 'dropout' is 1.5: expected a number >= 0 and < 1"):
        BiLMOptions.from_file(write_options(lambda options: options.__setitem__("dropout", 1.5)))


def test_every_option_has_its_place_in_options_json():
    assert set(OPTION_NAMES) <= set(FILE_KEYS)
    assert "extra" not in OPTION_NAMES and "lstm_dim" in OPTION_NAMES


def test_options_made_in_python_are_checked_by_the_same_schema():
    with pytest.raises(ValueError, match="lstm_dim"):
        BiLMOptions(filters=[(1, 4)], lstm_dim=0)
    options = BiLMOptions(filters=[[1, 4], [2, 8.0]], lstm_dim=32.0)  # a config's lists, integral floats
    assert options.filters == [(1, 4), (2, 8)] and isinstance(options.lstm_dim, int)
