"""Hugging Face Marian (opus-mt) directories built inside the tests, as transformers'
conversion script builds them from a Marian model: SentencePiece models for cutting, a
vocabulary of their pieces in Marian's order (``</s>`` 0, ``<unk>`` 1, then by frequency,
``<pad>`` added last), and for a whole model random weights saved by ``save_pretrained``.
Nothing is downloaded.
"""

import collections
import json
import os
import random

import sentencepiece as spm

GERMAN = [
    "Ich habe heute keine Zeit.",
    "Das Wetter ist schön.",
    "Wo ist der Bahnhof?",
    "Wir gehen morgen ins Kino.",
    "Der Hund schläft unter dem Tisch.",
    "Können Sie mir bitte helfen?",
    "Die Straße ist sehr lang.",
    "Öffnen Sie bitte das Fenster.",
    "Meine Schwester wohnt in Berlin.",
    "Das Buch liegt auf dem Stuhl.",
    "Er trinkt jeden Morgen Kaffee.",
    "Die Kinder spielen im Garten.",
    "Wie spät ist es jetzt?",
    "Ich verstehe die Frage nicht.",
    "Der Zug kommt um acht Uhr an.",
    "Wir müssen die Datei speichern.",
    "Die Datei wurde nicht gefunden.",
    "Bitte geben Sie Ihr Passwort ein.",
    "Das Programm wird beendet.",
    "Möchten Sie die Änderungen übernehmen?",
    "Es regnet schon seit drei Tagen.",
    "Sie liest gern alte Bücher.",
    "Unser Lehrer erklärt die Grammatik.",
    "Der Apfel ist grün und süß.",
    "Heute Abend kochen wir Suppe.",
    "Die Tür ist verschlossen.",
    "Ich suche meinen Schlüssel.",
    "Das Fenster wurde geschlossen.",
    "Viele Grüße aus München.",
    "Der Drucker ist nicht bereit.",
]
SPANISH = [
    "Hoy no tengo tiempo.",
    "El tiempo es bonito.",
    "¿Dónde está la estación?",
    "Mañana vamos al cine.",
    "El perro duerme debajo de la mesa.",
    "¿Puede ayudarme, por favor?",
    "La calle es muy larga.",
    "Abra la ventana, por favor.",
    "Mi hermana vive en Madrid.",
    "El libro está sobre la silla.",
    "Él bebe café cada mañana.",
    "Los niños juegan en el jardín.",
    "¿Qué hora es ahora?",
    "No entiendo la pregunta.",
    "El tren llega a las ocho.",
    "Tenemos que guardar el archivo.",
    "No se encontró el archivo.",
    "Introduzca su contraseña.",
    "El programa se cerrará.",
    "¿Desea aplicar los cambios?",
    "Llueve desde hace tres días.",
    "A ella le gustan los libros viejos.",
    "Nuestro profesor explica la gramática.",
    "La manzana es verde y dulce.",
    "Esta noche cocinamos sopa.",
    "La puerta está cerrada.",
    "Busco mi llave.",
    "La ventana fue cerrada.",
    "Saludos desde Sevilla.",
    "La impresora no está lista.",
]
CHINESE = [
    "我今天没有时间。",
    "天气很好。",
    "火车站在哪里？",
    "我们明天去看电影。",
    "狗在桌子下面睡觉。",
    "你能帮我吗？",
    "这条街很长。",
    "请打开窗户。",
    "我姐姐住在北京。",
    "书在椅子上。",
    "他每天早上喝咖啡。",
    "孩子们在花园里玩。",
    "现在几点了？",
    "我不明白这个问题。",
    "火车八点到。",
    "我们必须保存文件。",
    "找不到文件。",
    "请输入您的密码。",
    "程序将退出。",
    "是否应用更改？",
    "已经下了三天雨了。",
    "她喜欢看旧书。",
    "老师讲解语法。",
    "苹果又绿又甜。",
    "今晚我们做汤。",
    "门锁上了。",
    "我在找我的钥匙。",
    "窗户关上了。",
    "来自上海的问候。",
    "打印机没有准备好。",
]


# Characters none of the models has seen: each cuts to a piece no vocabulary holds.
def corpus(sentences: list[str], lines: int = 300, seed: int = 0) -> list[str]:
    """``lines`` lines of two or three sentences each, drawn with a fixed seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(sentences, k=rng.randint(2, 3))) for _ in range(lines)]


def train_marian_spm(lines: list[str], path: str, vocab_size: int) -> spm.SentencePieceProcessor:
    """A SentencePiece model as Marian's (default ids: <unk> 0, <s> 1, </s> 2)."""
    with open(path, "wb") as writer:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=writer,
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            num_threads=1,
            minloglevel=2,
        )
    return spm.SentencePieceProcessor(model_file=path)


def marian_vocabulary(models_and_lines, codes=(), drop=(), pad_id=None) -> dict[str, int]:
    """vocab.json as Marian's vocabulary and the conversion lay it out: </s> 0, <unk> 1,
    language codes, the pieces by their frequency in the cut text (pieces in ``drop``
    left out), then <pad> (at ``pad_id`` if given, the pieces from there on one id up)."""
    counts = collections.Counter()
    for model, lines in models_and_lines:
        for pieces in model.encode(lines, out_type=str):
            counts.update(pieces)
        for i in range(model.get_piece_size()):
            if not (model.is_control(i) or model.is_unknown(i)):
                counts[model.id_to_piece(i)] += 0
    order = sorted(counts, key=lambda piece: (-counts[piece], piece))
    pieces = ["</s>", "<unk>", *codes, *(p for p in order if p not in drop)]
    pieces.insert(len(pieces) if pad_id is None else pad_id, "<pad>")
    return {piece: i for i, piece in enumerate(pieces)}


def write_json(path, contents) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(contents, f, ensure_ascii=False, indent=2)


def marian_directory(
    path, source_lines, target_lines, *, separate, codes=(), drop=(), sizes=(160, 180)
):
    """A Marian tokenizer directory as transformers' conversion writes it; ``sizes``: the
    SentencePiece models' vocabulary sizes. Separate vocabularies (of different sizes, as
    the models' pieces fall) hold <pad> at one id, Marian's one pad_token_id: the smaller
    one's last id, inside the larger one."""
    os.makedirs(path)
    source = train_marian_spm(source_lines, os.path.join(path, "source.spm"), sizes[0])
    target = train_marian_spm(target_lines, os.path.join(path, "target.spm"), sizes[1])
    if separate:
        sides = ((source, source_lines, ()), (target, target_lines, codes))
        pad_id = min(len(marian_vocabulary([(m, lines)], c, drop)) for m, lines, c in sides) - 1
        source_vocab, target_vocab = (
            marian_vocabulary([(m, lines)], c, drop, pad_id) for m, lines, c in sides
        )
        write_json(path / "vocab.json", source_vocab)
        write_json(path / "target_vocab.json", target_vocab)
    else:
        both = [(source, source_lines), (target, target_lines)]
        write_json(path / "vocab.json", marian_vocabulary(both, codes, drop))
    config = {"target_lang": "tgt", "source_lang": "src", "separate_vocabs": separate}
    write_json(path / "tokenizer_config.json", config)
    specials = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    write_json(path / "special_tokens_map.json", specials)
    return str(path)


def marian_model_directory(
    path, source_lines, target_lines, *, separate=False, seed=0, eos_bias=0.0,
    start_row=False, start_id=None, **shape,
):  # fmt: skip
    """A whole Marian directory: the tokenizer files of ``marian_directory`` and a
    random-weight MarianMTModel (``shape``: MarianConfig fields, e.g. d_model) saved beside
    them, with opus-mt's generation settings (the padding start token never generated).
    Weights are drawn with std 0.3 (logits far apart: no near-ties between frameworks),
    final_logits_bias at random with ``eos_bias`` added to EOS's (so that translations end
    before their length limit) and -30 on the padding start token, which a trained model
    gives no probability either. EOS is not forced at the length limit (jaxtrans never
    forces it).

    ``start_row``: the decoder's start row (<pad>'s embedding) drawn at random like the
    others, not zero, as in a model made or fine-tuned in transformers 5 (which zeroes it
    at initialisation only; a tied output projection trains it). ``start_id``: the decoder
    starts from this token instead of <pad> (transformers allows any)."""
    import torch
    import transformers

    path = marian_directory(path, source_lines, target_lines, separate=separate)
    with open(os.path.join(path, "vocab.json"), encoding="utf-8") as f:
        source_vocab = json.load(f)
    size, pad_id = len(source_vocab), source_vocab["<pad>"]
    settings = dict(
        d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=256, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        init_std=0.3,
    )  # fmt: skip
    settings.update(shape)
    if separate:
        with open(os.path.join(path, "target_vocab.json"), encoding="utf-8") as f:
            settings["decoder_vocab_size"] = len(json.load(f))
        settings["share_encoder_decoder_embeddings"] = False
    start_id = pad_id if start_id is None else start_id
    config = transformers.MarianConfig(
        vocab_size=size, pad_token_id=pad_id, eos_token_id=0, decoder_start_token_id=start_id,
        **settings,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        bias = torch.randn(model.final_logits_bias.shape) * 0.5
        bias[0, 0] += eos_bias
        bias[0, pad_id] = -30.0
        model.final_logits_bias.copy_(bias)
        if start_row:
            row = model.get_decoder().embed_tokens.weight[pad_id]
            row.copy_(torch.randn(row.shape) * settings["init_std"])
    model.generation_config.bad_words_ids = [[pad_id]]
    model.generation_config.forced_eos_token_id = None
    model.save_pretrained(path)
    return path


def marian_generate(path, sentences, num_beams: int = 1, max_extra: int = 10) -> list[str]:
    """transformers' translations, one sentence at a time, as jaxtrans decodes: the length
    limit source ids + ``max_extra``, beam search with length_penalty 1.0 run until no beam
    can improve, EOS not forced."""
    import torch
    import transformers

    tokenizer = transformers.MarianTokenizer.from_pretrained(path)
    model = transformers.MarianMTModel.from_pretrained(path).eval()
    out = []
    for sentence in sentences:
        inputs = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            tokens = model.generate(
                **inputs, num_beams=num_beams, do_sample=False, length_penalty=1.0,
                early_stopping="never", forced_eos_token_id=None,
                max_new_tokens=inputs["input_ids"].shape[1] + max_extra,
            )  # fmt: skip
        # Without the start token (generate returns it first; an ordinary token may be it).
        out.append(tokenizer.decode(tokens[0, 1:], skip_special_tokens=True))
    return out
