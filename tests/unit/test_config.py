"""Config: zero config from the environment, the file, overrides, and clear errors."""

from __future__ import annotations

import pytest

from crow.config import ConfigError, Paths, load_config
from crow.config.template import Found, write_default_config


@pytest.fixture
def paths(tmp_path):
    return Paths(home=tmp_path / "home")


@pytest.fixture
def no_env(monkeypatch):
    for var in ("CROW_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def embedded(monkeypatch):
    """Whether the local extra counts as installed."""

    def set_installed(installed: bool) -> None:
        monkeypatch.setattr("crow.extras.embedded_available", lambda: installed)

    return set_installed


def test_zero_config_guesses_ollama_on_localhost(paths, no_env, embedded):
    embedded(False)
    config = load_config(paths)
    [name] = config.chain
    assert config.providers["default"].base_url == "http://localhost:11434/v1"
    assert config.providers["default"].guessed
    assert config.models[name].model_id == name


@pytest.mark.parametrize(
    ("ollama_host", "base_url"),
    [
        ("", "http://localhost:11434/v1"),
        ("gpu-box", "http://gpu-box:11434/v1"),
        ("gpu-box:8080", "http://gpu-box:8080/v1"),
        ("https://ollama.example", "https://ollama.example:443/v1"),
        ("0.0.0.0", "http://localhost:11434/v1"),  # a bind to every address: this machine
        ("[::1]:9999", "http://[::1]:9999/v1"),
        ("host:notaport", "http://localhost:11434/v1"),  # not one ollama could use either
    ],
)
def test_zero_config_finds_ollama_where_ollama_host_says(
    paths, no_env, embedded, monkeypatch, ollama_host, base_url
):
    embedded(False)
    monkeypatch.setenv("OLLAMA_HOST", ollama_host)
    config = load_config(paths)
    assert config.providers["default"].base_url == base_url
    assert config.providers["default"].guessed


def test_zero_config_falls_back_to_the_embedded_model_when_installed(paths, no_env, embedded):
    embedded(True)
    config = load_config(paths)
    assert config.chain == ("qwen3:8b", "smollm2-135m")
    local = config.models["smollm2-135m"]
    assert config.providers[local.provider].kind == "local"
    assert local.capabilities == frozenset() and local.context_window == 8192


@pytest.mark.parametrize("var", ["OPENAI_BASE_URL", "CROW_MODEL"])
def test_a_model_named_in_the_environment_is_not_second_guessed(
    paths, no_env, embedded, monkeypatch, var
):
    embedded(True)
    monkeypatch.setenv(var, {"OPENAI_BASE_URL": "http://gpu:8000/v1", "CROW_MODEL": "x"}[var])
    config = load_config(paths)
    assert len(config.chain) == 1
    assert config.providers["default"].guessed is (var == "CROW_MODEL")


def test_a_local_provider_needs_no_base_url_and_a_bad_kind_is_named(paths):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[providers.mine]\nkind = "local"\n[models.tiny]\nprovider = "mine"\nid = "/m.gguf"\n'
    )
    config = load_config(paths)
    assert config.providers["mine"].kind == "local" and config.models["tiny"].model_id == "/m.gguf"
    paths.config_file.write_text('[providers.mine]\nkind = "magic"\nbase_url = "x"\n')
    with pytest.raises(ConfigError, match=r"providers\.mine\.kind: expected openai or local"):
        load_config(paths)


def test_zero_config_reads_the_environment(paths, monkeypatch):
    monkeypatch.setenv("CROW_MODEL", "llama3.2")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gpu:8000/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = load_config(paths)
    assert config.chain == ("llama3.2",)
    assert config.providers["default"].base_url == "http://gpu:8000/v1"
    assert config.providers["default"].api_key == "sk-test"


def test_command_line_overrides_beat_the_environment(paths, monkeypatch):
    monkeypatch.setenv("CROW_MODEL", "from-env")
    config = load_config(paths, model="from-cli", base_url="http://cli:1/v1")
    assert config.chain == ("from-cli",)
    assert config.providers["default"].base_url == "http://cli:1/v1"


OLLAMA = "http://localhost:11434/v1"


def test_init_writes_what_it_found_with_the_embedded_model_last(paths, no_env):
    found = Found(ollama_url=OLLAMA, ollama_models=("qwen3:8b", "gemma3:270m"), embedded=True)
    written, said = write_default_config(paths, found=found)
    config = load_config(paths)
    assert written == paths.config_file and said == [] and config.warnings == ()
    assert config.chain == ("qwen3:8b", "smollm2-135m")
    assert set(config.models) == {"qwen3:8b", "gemma3:270m", "smollm2-135m"}
    assert config.providers["ollama"].base_url == OLLAMA
    embedded = config.models["smollm2-135m"]
    assert embedded.capabilities == frozenset() and embedded.context_window == 8192
    with pytest.raises(FileExistsError):
        write_default_config(paths, found=found)


def test_init_with_nothing_running_names_the_embedded_model(paths, no_env):
    found = Found(ollama_url=OLLAMA, ollama_models=None, embedded=True)
    write_default_config(paths, found=found)
    config = load_config(paths)
    assert config.chain == ("smollm2-135m",)
    assert "# [providers.ollama]" in paths.config_file.read_text()


def test_init_with_nothing_at_all_leaves_zero_config_and_says_so(paths, no_env, embedded):
    embedded(False)
    found = Found(ollama_url=OLLAMA, ollama_models=None, embedded=False)
    _, said = write_default_config(paths, found=found)
    assert load_config(paths).chain == ("qwen3:8b",)  # zero config: a guess, each run
    assert len(said) == 1 and "no model found" in said[0]


def test_init_takes_the_embedded_model_by_name_and_puts_a_named_model_first(paths, no_env):
    found = Found(ollama_url=OLLAMA, ollama_models=("qwen3:8b",), embedded=True)
    write_default_config(paths, found=found, model="smollm2-135m")
    assert load_config(paths).chain == ("smollm2-135m", "qwen3:8b")
    _, said = write_default_config(paths, found=found, model="llama3:8b", force=True)
    assert load_config(paths).chain == ("llama3:8b", "smollm2-135m")
    assert said == ["ollama has no llama3:8b yet: ollama pull llama3:8b"]


def test_acp_v2_is_on_unless_switched_off(paths):
    assert load_config(paths).acp.v2 is True
    paths.home.mkdir(parents=True)
    paths.config_file.write_text("[acp]\nv2 = false\n")
    assert load_config(paths).acp.v2 is False


def test_server_init_timeout_defaults_to_10_s_and_is_configurable(paths):
    assert load_config(paths).server.init_timeout_s == 10.0
    paths.home.mkdir(parents=True)
    paths.config_file.write_text("[server]\ninit_timeout_s = 2.5\n")
    assert load_config(paths).server.init_timeout_s == 2.5
    paths.config_file.write_text("[server]\ninit_timeout_s = -1\n")
    with pytest.raises(ConfigError, match=r"server\.init_timeout_s"):
        load_config(paths)


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", '"many"'])
def test_max_sessions_per_connection_defaults_to_64_and_must_be_a_positive_integer(paths, bad):
    assert load_config(paths).server.max_sessions_per_connection == 64
    paths.home.mkdir(parents=True)
    paths.config_file.write_text("[server]\nmax_sessions_per_connection = 1000\n")
    assert load_config(paths).server.max_sessions_per_connection == 1000
    paths.config_file.write_text(f"[server]\nmax_sessions_per_connection = {bad}\n")
    with pytest.raises(ConfigError, match=r"server\.max_sessions_per_connection"):
        load_config(paths)


def test_orphan_sweep_s_defaults_to_5_and_must_be_positive(paths):
    assert load_config(paths).server.orphan_sweep_s == 5.0
    paths.home.mkdir(parents=True)
    paths.config_file.write_text("[server]\norphan_sweep_s = 60\n")
    assert load_config(paths).server.orphan_sweep_s == 60.0
    paths.config_file.write_text("[server]\norphan_sweep_s = 0\n")
    with pytest.raises(ConfigError, match=r"server\.orphan_sweep_s"):
        load_config(paths)


def test_unload_idle_s_defaults_to_300_and_must_not_be_negative(paths):
    assert load_config(paths).server.unload_idle_s == 300.0
    paths.home.mkdir(parents=True)
    paths.config_file.write_text("[server]\nunload_idle_s = 0\n")
    assert load_config(paths).server.unload_idle_s == 0.0
    paths.config_file.write_text("[server]\nunload_idle_s = -1\n")
    with pytest.raises(ConfigError, match=r"server\.unload_idle_s"):
        load_config(paths)


def test_a_file_with_a_fallback_chain_and_overrides(paths):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[model]\ndefault = "a"\nfallback = ["b"]\n'
        '[providers.p]\nbase_url = "http://p/v1"\napi_key_env = "P_KEY"\n'
        '[models.a]\nprovider = "p"\nid = "model-a"\ncapabilities = ["tools", "image"]\n'
        "context_window = 1000\n"
        '[models.b]\nprovider = "p"\n'
    )
    config = load_config(paths)
    assert config.chain == ("a", "b")
    assert config.models["a"].capabilities == {"tools", "image"}
    assert config.models["a"].context_window == 1000
    assert load_config(paths, model="b").chain == ("b", "a")
    adhoc = load_config(paths, model="c", base_url="http://other/v1")
    assert adhoc.chain[0] == "c" and adhoc.providers[adhoc.models["c"].provider].base_url == (
        "http://other/v1"
    )


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[model\n", "(file)", "valid TOML"),
        ('[models.x]\nprovider = "nowhere"\n', "models.x.provider", "one of"),
        (
            '[providers.p]\nbase_url = "u"\n[models.x]\nprovider = "p"\ncontext_window = "big"\n',
            "models.x.context_window",
            "a positive integer",
        ),
        (
            '[providers.p]\nbase_url = "u"\n[models.x]\nprovider = "p"\ncapabilities = ["video"]\n',
            "models.x.capabilities",
            "a list from",
        ),
        (
            '[model]\ndefault = "y"\n[providers.p]\nbase_url = "u"\n[models.x]\nprovider = "p"\n',
            "model.default",
            "a model defined under [models]",
        ),
        ("[retry]\nattempts = 0\n", "retry.attempts", "a positive integer"),
        ("[providers.p]\n", "providers.p.base_url", "a non-empty string"),
        ('[acp]\nv2 = "no"\n', "acp.v2", "true or false"),
        ("acp = 1\n", "acp", "a table"),
        ('[web]\nallow_hosts = "localhost"\n', "web.allow_hosts", "a list of host names"),
        ("[web]\nallow_hosts = [8080]\n", "web.allow_hosts", "a list of host names"),
        ('[web]\nallow_hosts = ["http://x/"]\n', "web.allow_hosts", "a list of host names"),
        ('[web]\nallow_hosts = ["x:99999"]\n', "web.allow_hosts", "a list of host names"),
        ('[web]\nallow_hosts = [""]\n', "web.allow_hosts", "a list of host names"),
        ("[limits]\nmax_prompt_mib = 0\n", "limits.max_prompt_mib", "a positive number"),
        ('[mcp]\nask_client_servers = "yes"\n', "mcp.ask_client_servers", "true or false"),
        (
            '[mcp.servers.s]\ncommand = "/bin/s"\ntrusted = 1\n',
            "mcp.servers.s.trusted",
            "true or false",
        ),
        ('[memory]\nembedder = "bert"\n', "memory.embedder", "offline or openai or none"),
        ('[memory]\nembedder = "openai"\n', "memory.url", "the /v1 base URL"),
        ('[memory]\nremember = "sometimes"\n', "memory.remember", "allow or ask or deny"),
        ("[memory]\nrecall_threshold = 2\n", "memory.recall_threshold", "a number from 0 to 1"),
        ("[memory]\nmerge_threshold = 0\n", "memory.merge_threshold", "a number above 0"),
        ("[memory]\nrecall_limit = 0\n", "memory.recall_limit", "a positive integer"),
        ('[memory]\nauto_recall = "no"\n', "memory.auto_recall", "true or false"),
        ('[tools]\nbuiltin = ["brain"]\n', "tools.builtin", "a list from"),
        ('[judge]\nmodel = "oracle"\n', "judge.model", "a model of [models]"),
        ("[judge]\nmax_rounds = 0\n", "judge.max_rounds", "a positive integer"),
        ("[judge]\ncheck_timeout_s = 0\n", "judge.check_timeout_s", "a positive number"),
        ("[judge]\nevery_session = 1\n", "judge.every_session", "true or false"),
        ("[judge]\ncheck = 5\n", "judge.check", "a non-empty string"),
    ],
)
def test_config_errors_name_file_key_and_expectation(paths, text, key, expected):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(paths)
    message = str(info.value)
    assert message.startswith(f"{paths.config_file}: {key}: expected {expected}")


def test_memory_settings_and_their_tool_policies(paths):
    config = load_config(paths)
    assert config.memory.embedder == "offline" and config.memory.auto_recall
    assert "memory" in config.tools.builtin
    assert config.tools.tool_policies == {
        "memory__remember": "allow",
        "memory__forget": "allow",
    }
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[memory]\nembedder = "openai"\nurl = "http://gpu:11434/v1"\nforget = "ask"\n'
        "auto_recall = false\nrecall_threshold = 0.5\n"
    )
    config = load_config(paths)
    assert (config.memory.embedder, config.memory.url) == ("openai", "http://gpu:11434/v1")
    assert config.memory.model == "nomic-embed-text"
    assert not config.memory.auto_recall and config.memory.recall_threshold == 0.5
    assert config.tools.tool_policies["memory__forget"] == "ask"
    assert config.paths.memory == paths.home / "memory"


def test_web_allow_hosts(paths):
    assert load_config(paths).tools.fetch_allow_hosts == ()
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[web]\nallow_hosts = ["localhost:8080", "wiki.internal", "10.0.0.0/8", "[::1]:80"]\n'
    )
    assert load_config(paths).tools.fetch_allow_hosts == (
        "localhost:8080",
        "wiki.internal",
        "10.0.0.0/8",
        "[::1]:80",
    )


def test_trust_limits_and_client_servers(paths):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        "[limits]\nmax_prompt_mib = 2\n[mcp]\nask_client_servers = true\n"
        '[mcp.servers.a]\ncommand = "/bin/a"\ntrusted = true\n'
        '[mcp.servers.b]\ncommand = "/bin/b"\n'
    )
    config = load_config(paths)
    assert config.limits.max_prompt_bytes == 2 * 1024 * 1024
    assert config.tools.ask_client_servers is True
    assert [(s.name, s.trusted) for s in config.tools.servers] == [("a", True), ("b", False)]
    defaults = load_config(Paths(home=paths.home / "none"))
    assert defaults.limits.max_prompt_mib == 8 and not defaults.tools.ask_client_servers


def test_the_environment_beats_the_file_and_the_flags_beat_both(paths, no_env, monkeypatch):
    write_default_config(
        paths, found=Found(ollama_url=OLLAMA, ollama_models=("qwen3:8b",), embedded=False)
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:1/v1")
    monkeypatch.setenv("CROW_MODEL", "env-model")
    config = load_config(paths)
    first = config.models[config.chain[0]]
    assert first.model_id == "env-model"
    assert config.providers[first.provider].base_url == "http://env:1/v1"
    flagged = load_config(paths, model="flag-model", base_url="http://flag:2/v1")
    first = flagged.models[flagged.chain[0]]
    assert first.model_id == "flag-model"
    assert flagged.providers[first.provider].base_url == "http://flag:2/v1"


def test_init_writes_the_model_and_endpoint_it_is_given(paths):
    found = Found(
        ollama_url=OLLAMA,
        ollama_models=None,
        embedded=False,
        server_url="http://gpu:8000/v1",
        server_models=("a", 'we"ird'),
    )
    _, said = write_default_config(paths, model='we"ird', found=found)
    config = load_config(paths)
    assert said == [] and config.chain == ('we"ird',)
    assert config.models['we"ird'].model_id == 'we"ird'
    assert config.providers["server"].base_url == "http://gpu:8000/v1"


def test_unknown_tables_and_keys_are_warnings_with_the_closest_name(paths):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[modle]\ndefault = "x"\n\n[model]\nmax_step = 3\n\n[providers.p]\n'
        'base_url = "http://h/v1"\nkindd = "openai"\n\n[models.m]\nprovider = "p"\n\n'
        '[mcp.servers.s]\ncommand = "c"\nenv = { ANY_NAME = "1" }\n\n[zzz]\n'
    )
    warnings = [w.split(": ", 1)[1] for w in load_config(paths).warnings]
    assert warnings == [
        "unknown table [modle] (did you mean [model]?): Crow ignores it",
        "unknown key model.max_step (did you mean model.max_steps?): Crow ignores it",
        "unknown key providers.p.kindd (did you mean providers.p.kind?): Crow ignores it",
        "unknown table [zzz]: Crow ignores it",
    ]


def test_a_local_model_gets_tools_only_when_declared(paths, no_env):
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[providers.mine]\nkind = "local"\n\n[models.gguf]\nprovider = "mine"\n'
        'id = "/m.gguf"\n\n[models.caller]\nprovider = "mine"\nid = "/c.gguf"\n'
        'capabilities = ["tools"]\n\n[models.tiny]\nprovider = "mine"\nid = "smollm2-135m"\n'
    )
    config = load_config(paths)
    assert config.models["gguf"].capabilities == frozenset()
    assert config.models["caller"].capabilities == {"tools"}
    assert (config.models["tiny"].context_window, config.models["tiny"].max_output_tokens) == (
        8192,
        1024,
    )


def test_the_embedded_model_is_asked_for_by_name(paths, no_env):
    assert load_config(paths, model="smollm2-135m").chain == ("smollm2-135m",)
    assert load_config(paths, model="smollm2-135m").providers["embedded"].kind == "local"
    write_default_config(
        paths, found=Found(ollama_url=OLLAMA, ollama_models=("qwen3:8b",), embedded=False)
    )
    config = load_config(paths, model="smollm2-135m")
    assert config.chain == ("smollm2-135m", "qwen3:8b")
    assert config.models["smollm2-135m"].provider == "embedded"


def test_a_bad_crow_store_url_is_blamed_on_the_environment(paths, monkeypatch):
    monkeypatch.setenv("CROW_STORE_URL", "mysql://me:pw@db/x")
    with pytest.raises(ConfigError) as failure:
        load_config(paths)
    said = str(failure.value)
    assert said.startswith("the environment: CROW_STORE_URL:") and "pw" not in said


def test_judge_settings(paths):
    config = load_config(paths)
    assert (config.judge.model, config.judge.max_rounds, config.judge.every_session) == (
        None,
        1,
        False,
    )
    paths.home.mkdir(parents=True)
    paths.config_file.write_text(
        '[providers.p]\nbase_url = "http://h/v1"\n\n[models.main]\nprovider = "p"\n\n'
        '[models.strict]\nprovider = "p"\n\n[judge]\nmodel = "strict"\n'
        'check = "pytest -q"\nmax_rounds = 3\nevery_session = true\n'
    )
    config = load_config(paths)
    assert config.judge.model == "strict" and config.judge.check == "pytest -q"
    assert config.judge.max_rounds == 3 and config.judge.every_session
