"""Datasets as users already have them: LLaMA-Factory's demo files, ShareGPT, Anthropic HH, UltraFeedback and
GSM8K, each in the shape those files really have, are converted to TRL's formats, say what was done, and are
refused with the row and column named when a row does not fit."""
import json

import pytest

from backend.data import DataOptions, DatasetError, prepare_dataset, preview
from tests.dataset_shapes import (ALPACA, BAD, GOOD, GSM8K, HH, IDENTITY, LF_DPO, LF_KTO, Q, SHAREGPT,
                                  ULTRAFEEDBACK)

def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def write(workspace, rows, name="data.json"):
    path = workspace / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) if name.endswith(".jsonl") else json.dumps(rows))
    return str(path)


def load(workspace, rows, mode, name="data.json", columns=None):
    return prepare_dataset(write(workspace, rows, name), mode, options=DataOptions(columns=columns or {}))


# ---- alpaca ----

def test_alpaca_becomes_a_conversational_prompt_and_completion(workspace):
    ds, info = load(workspace, ALPACA, "sft", "alpaca_en_demo.json")
    assert info.name == "prompt_completion" and info.conversational and ds.column_names == ["prompt", "completion"]
    assert ds[0] == {"prompt": [user("Describe a process of making crepes.")],
                     "completion": [assistant("Making crepes is easy.")]}
    assert ds[1]["prompt"] == [user("Translate to French:\nGood morning")]
    assert info.adapter.startswith("alpaca → prompt + completion")
    assert "`input` appended to the instruction" in info.adapter and "history" not in info.adapter


def test_alpaca_system_and_history_become_earlier_messages(workspace):
    ds, info = load(workspace, IDENTITY, "sft", "identity.json")
    assert ds[0]["prompt"] == [{"role": "system", "content": "You are a helpful assistant."}, user("hi"),
                               assistant("Hello!"), user("Who are you?")]
    assert ds[1]["prompt"] == [user("What is your name?")]  # empty system and history: nothing added
    assert info.adapter.endswith("`system` as the system message; `history` as earlier turns")


@pytest.mark.parametrize("row, problem", [
    ({"instruction": "q", "input": "", "output": ""}, "row 2: column `output` is empty; alpaca needs the answer"),
    ({"instruction": "", "input": "x", "output": "a"}, "row 2: column `instruction` is empty"),
    ({"instruction": "q", "output": "a", "history": [["only one"]]}, "row 2: column `history` pair 1 is"),
])
def test_a_bad_alpaca_row_is_named(workspace, row, problem):
    with pytest.raises(DatasetError, match=problem.replace("(", r"\(")):
        load(workspace, [ALPACA[0], row], "sft")


def test_alpaca_without_output_names_the_missing_column(workspace):
    with pytest.raises(DatasetError) as err:
        load(workspace, [{"instruction": "q", "input": ""}], "sft")
    assert "look like alpaca (`instruction`), but `output` is missing" in str(err.value)


def test_alpaca_with_chosen_and_rejected_trains_preferences(workspace):
    rows = [{"instruction": "Capital of France?", "input": "", "chosen": "Paris.", "rejected": "Lyon."}]
    for mode in ("dpo", "rm"):
        ds, info = load(workspace, rows, mode)
        assert ds[0] == {"prompt": [user("Capital of France?")], "chosen": [assistant("Paris.")],
                         "rejected": [assistant("Lyon.")]}
        assert info.adapter.startswith("alpaca → prompt + chosen + rejected")


def test_alpaca_with_a_kto_tag_trains_kto_and_is_refused_for_sft(workspace):
    rows = [dict(ALPACA[0], kto_tag=True), dict(ALPACA[1], kto_tag=False)]
    ds, info = load(workspace, rows, "kto")
    assert ds["label"] == [True, False] and ds[1]["completion"] == [assistant("Bonjour")]
    with pytest.raises(DatasetError, match=r"alpaca KTO data \(instruction \+ kto_tag \+ output .*KTO only"):
        load(workspace, rows, "sft")


# ---- ShareGPT and LLaMA-Factory's preference and KTO files ----

def test_sharegpt_becomes_messages_with_tool_turns_and_tools(workspace):
    ds, info = load(workspace, SHAREGPT, "sft", "glaive_toolcall_en_demo.json")
    assert info.name == "messages" and ds.column_names == ["messages", "tools"]
    assert [m["role"] for m in ds[0]["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(ds[0]["tools"])[0]["name"] == "generate_password" and ds[1]["tools"] is None
    for said in ("human → user, gpt → assistant", "function_call → an assistant message",
                 "observation → a tool message", "`tools` passed to the chat template"):
        assert said in info.adapter


def test_sharegpt_turns_with_role_and_content_keys_are_read_too(workspace):
    ds, _ = load(workspace, [{"conversations": [user("Hi"), assistant("Hello!")]}], "sft")
    assert ds[0]["messages"] == [user("Hi"), assistant("Hello!")]


def test_sharegpt_system_column_is_the_system_message(workspace):
    rows = [{"conversations": SHAREGPT[1]["conversations"], "system": "Be brief."}]
    ds, info = load(workspace, rows, "sft")
    assert ds[0]["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize("turns, problem", [
    ([{"from": "bot", "value": "x"}], "column `conversations` turn 1 has from 'bot'; ShareGPT needs `from` one of"),
    ([{"from": "human", "value": None}], "column `conversations` turn 1 (human) has value of type null"),
    ([{"from": "human", "value": "only a question"}], "column `conversations` has no assistant message"),
])
def test_a_bad_sharegpt_turn_is_named(workspace, turns, problem):
    with pytest.raises(DatasetError, match=r"row 2: " + problem.replace("(", r"\(").replace(")", r"\)")):
        load(workspace, [SHAREGPT[1], {"conversations": turns}], "sft")


@pytest.mark.parametrize("mode", ["dpo", "rm"])
def test_llamafactory_preference_file_trains_dpo_and_rm(workspace, mode):
    ds, info = load(workspace, LF_DPO, mode, "dpo_en_demo.json")
    assert info.name == "preference" and info.conversational
    assert ds[0] == {"prompt": [user("What is the capital of France?")], "chosen": [assistant("Paris.")],
                     "rejected": [assistant("Lyon.")]}
    assert info.adapter.startswith("LLaMA-Factory preference (ShareGPT) → prompt + chosen + rejected")


def test_llamafactory_kto_file_splits_off_the_answer(workspace):
    ds, info = load(workspace, LF_KTO, "kto", "kto_en_demo.json")
    assert info.name == "unpaired_preference" and ds["label"] == [True, False]
    assert ds[0]["prompt"] == [user("The FTC is going after spyware.")]
    assert ds[0]["completion"] == [assistant("The FTC takes action against spyware makers.")]


def test_a_kto_conversation_must_end_with_the_answer(workspace):
    rows = [LF_KTO[0], {"messages": [assistant("Hi"), user("Bye")], "label": True}]
    with pytest.raises(DatasetError, match=r"row 2: column `messages` ends with a user turn; .* end with the answer"):
        load(workspace, rows, "kto")


def test_sharegpt_kto_tag_is_the_label(workspace):
    rows = [{"conversations": SHAREGPT[1]["conversations"], "kto_tag": False}]
    ds, info = load(workspace, rows, "kto")
    assert ds[0] == {"prompt": [user("Hi")], "completion": [assistant("Hello!")], "label": False}


def test_preference_pairs_are_unpaired_for_kto(workspace):
    ds, info = load(workspace, LF_DPO, "kto")
    assert len(ds) == 4 and sorted(ds["label"]) == [False, False, True, True]
    assert info.adapter.endswith("each pair unpaired into two rows: `chosen` with label true, `rejected` with "
                                 "label false")


def test_preference_data_for_sft_says_which_modes_it_converts_for(workspace):
    with pytest.raises(DatasetError) as err:
        load(workspace, LF_DPO, "sft")
    assert "columns are [conversations, chosen, rejected]" in str(err.value)
    assert "LLaMA-Factory preference data (conversations + chosen + rejected (+ system)), which is converted for " \
           "RM, DPO, KTO, ORPO, CPO, SIMPO only" in str(err.value)


# ---- implicit prompts, Anthropic HH, UltraFeedback ----

def test_an_implicit_prompt_is_the_shared_beginning(workspace):
    rows = [{"chosen": [user("Sky colour?"), assistant("Blue.")],
             "rejected": [user("Sky colour?"), assistant("Green.")]}]
    ds, info = load(workspace, rows, "dpo")
    assert ds[0] == {"prompt": [user("Sky colour?")], "chosen": [assistant("Blue.")],
                     "rejected": [assistant("Green.")]}
    assert "TRL's extract_prompt" in info.adapter


def test_implicit_prompt_pairs_that_share_nothing_are_named(workspace):
    rows = [{"chosen": [user("a"), assistant("b")], "rejected": [user("c"), assistant("d")]}]
    with pytest.raises(DatasetError, match=r"row 1: column `chosen` and `rejected` share no beginning"):
        load(workspace, rows, "dpo")


def test_anthropic_hh_strings_become_messages_with_the_prompt_split(workspace):
    ds, info = load(workspace, HH, "dpo", "hh.jsonl")
    assert ds[0]["prompt"] == [user("What are some good fruits?"), assistant("Apples and pears."),
                               user("Which is sweeter?")]
    assert ds[0]["chosen"] == [assistant("Pears, usually.")] and ds[0]["rejected"] == [assistant("Who cares.")]
    assert info.adapter.startswith("Anthropic HH → prompt + chosen + rejected")


def test_anthropic_hh_stays_plain_text_for_a_reward_model(workspace):
    ds, info = load(workspace, HH, "rm")  # chosen + rejected strings are RM's own format: nothing to convert
    assert info.adapter is None and ds[0] == HH[0]


@pytest.mark.parametrize("mode", ["dpo", "rm"])
def test_ultrafeedback_prompt_is_taken_from_the_answers(workspace, mode):
    ds, info = load(workspace, ULTRAFEEDBACK, mode)
    assert ds[0]["prompt"] == [user(Q)] and ds[0]["chosen"] == [assistant(GOOD)]
    assert ds[0]["rejected"] == [assistant(BAD)] and ds[0]["score_chosen"] == 8.0  # other columns stay
    assert info.adapter == ("mixed kinds → conversational; the first turns `chosen` and `rejected` share (they "
                            "repeat `prompt`) as the prompt")


def test_ultrafeedback_trains_kto_unpaired_and_sft_on_its_messages(workspace):
    ds, info = load(workspace, ULTRAFEEDBACK, "kto")
    assert len(ds) == 2 and ds[0]["prompt"] == [user(Q)] and ds["label"] == [True, False]
    ds, info = load(workspace, ULTRAFEEDBACK, "sft")
    assert info.name == "messages" and info.adapter is None


def test_a_string_prompt_the_answers_do_not_repeat_is_refused(workspace):
    rows = [dict(ULTRAFEEDBACK[0], prompt="Something else?")]
    with pytest.raises(DatasetError, match=r"row 1: column `prompt` is a string that `chosen` / `rejected` do not "
                                           r"repeat"):
        load(workspace, rows, "dpo")


def test_a_string_prompt_with_answer_messages_becomes_a_user_message(workspace):
    rows = [{"prompt": Q, "chosen": [assistant(GOOD)], "rejected": [assistant(BAD)]}]
    ds, info = load(workspace, rows, "dpo")
    assert ds[0]["prompt"] == [user(Q)] and "the string `prompt` as a user message" in info.adapter


# ---- GSM8K ----

@pytest.mark.parametrize("mode", ["grpo", "rloo", "ppo"])
def test_gsm8k_question_is_the_prompt_and_the_answer_stays(workspace, mode):
    ds, info = load(workspace, GSM8K, mode, "gsm8k.jsonl")
    assert info.name == "prompt_only" and ds[0]["prompt"] == [user(GSM8K[0]["question"])]
    assert ds[0]["answer"] == GSM8K[0]["answer"] and ds[0]["final_answer"] == "72"
    assert info.adapter == ("GSM8K questions → prompt; `question` as the user message; `answer` kept for the "
                            "reward sources; the text after its `####` (the final answer) as `final_answer`")


def test_a_gsm8k_answer_without_its_final_line_is_named(workspace):
    rows = GSM8K + [{"question": "1 + 1?", "answer": "It is 2."}]
    with pytest.raises(DatasetError, match=r"row 2: column `answer` has no `####` line"):
        load(workspace, rows, "grpo")


def test_questions_without_gsm8k_answers_still_become_prompts(workspace):
    ds, info = load(workspace, [{"question": "Why is the sky blue?"}], "grpo")
    assert ds.column_names == ["prompt"] and "final_answer" not in info.adapter


# ---- detection never guesses ----

def test_a_dataset_already_in_the_modes_format_is_not_converted(workspace):
    rows = [{"prompt": "q", "completion": "a", "instruction": "x", "output": "y"}]
    ds, info = load(workspace, rows, "sft")
    assert info.adapter is None and ds[0] == {"prompt": "q", "completion": "a"}


def test_a_dataset_two_formats_fit_is_refused_naming_both(workspace):
    rows = [{"instruction": "q", "output": "a", "conversations": SHAREGPT[1]["conversations"]}]
    with pytest.raises(DatasetError) as err:
        load(workspace, rows, "sft")
    assert "columns are [instruction, output, conversations], which fit both alpaca" in str(err.value)
    assert "and ShareGPT (conversations" in str(err.value)


def test_a_converted_column_that_exists_already_is_refused(workspace):
    rows = [{"instruction": "q", "output": "a", "prompt": "other"}]
    with pytest.raises(DatasetError, match=r"column `prompt` exists and alpaca makes a `prompt` from `instruction`"):
        load(workspace, rows, "sft")


def test_an_unknown_dataset_lists_the_formats_converted_for_the_mode(workspace):
    with pytest.raises(DatasetError) as err:
        load(workspace, [{"foo": "bar"}], "sft")
    assert "SFT needs one of: messages | prompt + completion | text; or one converted on the way: alpaca " \
           "(instruction + output (+ input, system, history)) | ShareGPT (conversations (+ system, tools))" \
           in str(err.value)


def test_the_preview_shows_converted_rows_and_the_sentence(workspace):
    write(workspace, ALPACA, "alpaca.json")
    df, info, error = preview("alpaca.json", "sft", workspace)
    assert error is None and list(df.columns) == ["prompt", "completion"]
    assert df["prompt"][0] == "user: Describe a process of making crepes."
    assert info.adapter.startswith("alpaca → prompt + completion")
    write(workspace, [{"instruction": "q", "output": ""}], "bad.json")
    df, info, error = preview("bad.json", "sft", workspace)
    assert info is None and "row 1: column `output` is empty" in error and list(df.columns) == ["instruction", "output"]


def test_the_cli_and_log_line_says_what_a_conversion_did(workspace):
    _, info = load(workspace, ALPACA, "sft")
    assert info.summary() == ("2 rows, prompt_completion format (prompt + completion, conversational); converted: "
                              "alpaca → prompt + completion (user message → assistant message); `input` appended "
                              "to the instruction after a newline")
    assert info.summary(rows=197).startswith("197 rows, prompt_completion format")


# ---- data.columns: which column is which ----

def test_mapped_columns_are_renamed_before_the_format_is_detected(workspace):
    ds, info = load(workspace, GSM8K, "grpo", "gsm8k.jsonl", columns={"prompt": "question"})
    assert ds.column_names == ["prompt", "answer"] and ds[0]["prompt"] == GSM8K[0]["question"]
    assert info.adapter is None and info.mapped == {"prompt": "question"}
    assert "columns mapped: `question` as `prompt`" in info.summary()
    ds, info = load(workspace, GSM8K, "sft", columns={"prompt": "question", "completion": "answer"})
    assert info.name == "prompt_completion" and ds[0]["completion"] == GSM8K[0]["answer"]


def test_a_mapping_can_bring_a_file_into_a_known_format(workspace):
    rows = [{"task": "Capital of France?", "response": "Paris."}]
    with pytest.raises(DatasetError, match="no SFT format found"):
        load(workspace, rows, "sft")
    ds, info = load(workspace, rows, "sft", columns={"instruction": "task", "output": "response"})
    assert ds[0]["prompt"] == [user("Capital of France?")] and info.adapter.startswith("alpaca →")


def test_a_mapped_column_that_does_not_exist_is_named_with_the_columns(workspace):
    with pytest.raises(DatasetError) as err:
        load(workspace, ALPACA, "sft", columns={"prompt": "question"})
    assert str(err.value) == ("data.columns: prompt=question, but data.json has no column `question`; its "
                              "columns are [instruction, input, output]")


def test_a_mapped_column_replaces_one_of_its_name(workspace):
    rows = [{"prompt": "old", "question": "new", "completion": "a"}]
    ds, info = load(workspace, rows, "sft", columns={"prompt": "question"})
    assert ds[0] == {"prompt": "new", "completion": "a"}


def test_the_preview_applies_the_mapping(workspace):
    write(workspace, [{"q": "Why?", "a": "Because."}], "qa.json")
    mapping = DataOptions(columns={"prompt": "q", "completion": "a"})
    df, info, error = preview("qa.json", "sft", workspace, options=mapping)
    assert error is None and list(df.columns) == ["prompt", "completion"]
    assert info.mapped == {"prompt": "q", "completion": "a"}
    df, info, error = preview("qa.json", "sft", workspace, options=DataOptions(columns={"prompt": "x"}))
    assert info is None and "has no column `x`" in error and list(df.columns) == ["q", "a"]
