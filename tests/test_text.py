"""Chinese-first normalisation: matching keys, tokens, sentence-aware chunking."""

from bencao.text import chunk_text, count_tokens, lang_of, norm_key, split_sentences, tokenize


def test_traditional_and_simplified_names_share_a_key():
    assert norm_key("當歸") == norm_key("当归") == "当归"
    assert norm_key("大棗") == norm_key("大枣")
    assert norm_key("枸杞子") == "枸杞子"


def test_full_width_folds_and_non_ascii_is_kept():
    assert norm_key("ＡＢＣ　大枣") == "abc 大枣"
    assert norm_key("Crème Brûlée") == "crème brûlée"
    assert norm_key("龙眼肉（桂圆）") == "龙眼肉(桂圆)"


def test_tokenize_chinese_and_english():
    toks = tokenize("當歸補血湯主治血虛發熱")
    assert "当归" in toks and "血虚" in toks
    assert tokenize("Onion rings, fried!") == ["onion", "rings", "fried"]
    assert tokenize("，。、") == []


def test_chunking_respects_sentences_and_budget():
    text = "味甘，平。主心腹邪气，安中养脾。久服，轻身、长年。" * 40
    chunks = chunk_text(text, max_tokens=60)
    assert "".join(chunks) == text
    assert all(count_tokens(c) <= 60 for c in chunks)
    assert all(c.endswith("。") for c in chunks)
    sentences = split_sentences(text)
    assert sentences[0] == "味甘，平。"


def test_overlong_sentence_is_cut_not_dropped():
    s = "甘" * 1000
    chunks = chunk_text(s, max_tokens=300)
    assert "".join(chunks) == s and len(chunks) == 4


def test_lang_of():
    assert lang_of("大枣的功效是什么？") == "zh"
    assert lang_of("What does jujube treat?") == "en"


def test_cjk_counts_count_ideographs_and_non_space_characters():
    from bencao.text import cjk_counts, lang_of

    text = "山药 味甘\u3000温。\tYam (Dioscorea) 𠮷\u2028\x1c!"
    assert cjk_counts(text) == (6, sum(1 for c in text if not c.isspace()))
    assert cjk_counts("") == (0, 0) and cjk_counts(" \n") == (0, 0)
    assert lang_of("山药 treats 脾虚") == "zh" and lang_of("Dioscorea opposita 山") == "en"
