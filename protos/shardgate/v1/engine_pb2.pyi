from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Finish(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_NONE: _ClassVar[Finish]
    FINISH_STOP: _ClassVar[Finish]
    FINISH_LENGTH: _ClassVar[Finish]
    FINISH_ABORT: _ClassVar[Finish]
    FINISH_ERROR: _ClassVar[Finish]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_NONE: _ClassVar[ErrorCode]
    ERROR_INVALID_ARGUMENT: _ClassVar[ErrorCode]
    ERROR_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_INTERNAL: _ClassVar[ErrorCode]
FINISH_NONE: Finish
FINISH_STOP: Finish
FINISH_LENGTH: Finish
FINISH_ABORT: Finish
FINISH_ERROR: Finish
ERROR_NONE: ErrorCode
ERROR_INVALID_ARGUMENT: ErrorCode
ERROR_NOT_FOUND: ErrorCode
ERROR_UNAVAILABLE: ErrorCode
ERROR_INTERNAL: ErrorCode

class LoadLoraRequest(_message.Message):
    __slots__ = ("name", "path")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class UnloadLoraRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class LoraReply(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelCard]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelCard, _Mapping]]] = ...) -> None: ...

class Faults(_message.Message):
    __slots__ = ("crash_after_tokens", "hang_after_tokens", "slow_token_s", "error_rate", "stop_heartbeats")
    CRASH_AFTER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HANG_AFTER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SLOW_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_RATE_FIELD_NUMBER: _ClassVar[int]
    STOP_HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    crash_after_tokens: int
    hang_after_tokens: int
    slow_token_s: float
    error_rate: float
    stop_heartbeats: bool
    def __init__(self, crash_after_tokens: _Optional[int] = ..., hang_after_tokens: _Optional[int] = ..., slow_token_s: _Optional[float] = ..., error_rate: _Optional[float] = ..., stop_heartbeats: _Optional[bool] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("key", "resume_token_ids", "generation")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    key: int
    resume_token_ids: _containers.RepeatedScalarFieldContainer[int]
    generation: bytes
    def __init__(self, key: _Optional[int] = ..., resume_token_ids: _Optional[_Iterable[int]] = ..., generation: _Optional[bytes] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: bytes
    def __init__(self, generation: _Optional[bytes] = ...) -> None: ...

class TokenizeReply(_message.Message):
    __slots__ = ("tokens", "max_model_len")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    max_model_len: int
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., max_model_len: _Optional[int] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("model", "tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class DetokenizeReply(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...

class LinkRequest(_message.Message):
    __slots__ = ("submits", "aborts")
    SUBMITS_FIELD_NUMBER: _ClassVar[int]
    ABORTS_FIELD_NUMBER: _ClassVar[int]
    submits: _containers.RepeatedCompositeFieldContainer[SubmitRequest]
    aborts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, submits: _Optional[_Iterable[_Union[SubmitRequest, _Mapping]]] = ..., aborts: _Optional[_Iterable[int]] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("key", "token_ids", "text", "finish", "prompt_tokens", "cached_tokens", "completion_tokens", "error_code", "error_message", "error_field", "logprobs", "stop_sequence", "parsed", "prompt_logprobs")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PARSED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    key: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finish: Finish
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    error_code: ErrorCode
    error_message: str
    error_field: str
    logprobs: bytes
    stop_sequence: str
    parsed: bytes
    prompt_logprobs: bytes
    def __init__(self, key: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finish: _Optional[_Union[Finish, str]] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., error_message: _Optional[str] = ..., error_field: _Optional[str] = ..., logprobs: _Optional[bytes] = ..., stop_sequence: _Optional[str] = ..., parsed: _Optional[bytes] = ..., prompt_logprobs: _Optional[bytes] = ...) -> None: ...

class LoadReport(_message.Message):
    __slots__ = ("seq", "running", "waiting", "kv_usage", "max_num_seqs", "ready", "preemptions", "prefix_hit_rate", "generated_tokens", "steps", "held")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    seq: int
    running: int
    waiting: int
    kv_usage: float
    max_num_seqs: int
    ready: bool
    preemptions: int
    prefix_hit_rate: float
    generated_tokens: int
    steps: int
    held: int
    def __init__(self, seq: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., kv_usage: _Optional[float] = ..., max_num_seqs: _Optional[int] = ..., ready: _Optional[bool] = ..., preemptions: _Optional[int] = ..., prefix_hit_rate: _Optional[float] = ..., generated_tokens: _Optional[int] = ..., steps: _Optional[int] = ..., held: _Optional[int] = ...) -> None: ...

class ModelCard(_message.Message):
    __slots__ = ("name", "max_model_len", "loras", "tokenizer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    LORAS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_model_len: int
    loras: _containers.RepeatedScalarFieldContainer[str]
    tokenizer: str
    def __init__(self, name: _Optional[str] = ..., max_model_len: _Optional[int] = ..., loras: _Optional[_Iterable[str]] = ..., tokenizer: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoReply(_message.Message):
    __slots__ = ("sidecar_id", "backend", "models", "group", "rank", "world_size", "max_num_seqs", "load", "heartbeat_interval_s", "link_port", "protocol_version", "capabilities", "kv_block_size")
    SIDECAR_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    LINK_PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    sidecar_id: str
    backend: str
    models: _containers.RepeatedCompositeFieldContainer[ModelCard]
    group: str
    rank: int
    world_size: int
    max_num_seqs: int
    load: LoadReport
    heartbeat_interval_s: float
    link_port: int
    protocol_version: int
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    kv_block_size: int
    def __init__(self, sidecar_id: _Optional[str] = ..., backend: _Optional[str] = ..., models: _Optional[_Iterable[_Union[ModelCard, _Mapping]]] = ..., group: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., load: _Optional[_Union[LoadReport, _Mapping]] = ..., heartbeat_interval_s: _Optional[float] = ..., link_port: _Optional[int] = ..., protocol_version: _Optional[int] = ..., capabilities: _Optional[_Iterable[str]] = ..., kv_block_size: _Optional[int] = ...) -> None: ...

class KvEvents(_message.Message):
    __slots__ = ("cleared", "removed", "stored")
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    cleared: bool
    removed: _containers.RepeatedScalarFieldContainer[int]
    stored: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, cleared: _Optional[bool] = ..., removed: _Optional[_Iterable[int]] = ..., stored: _Optional[_Iterable[int]] = ...) -> None: ...

class LinkResponse(_message.Message):
    __slots__ = ("deltas", "load", "info", "kv")
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    deltas: _containers.RepeatedCompositeFieldContainer[Delta]
    load: LoadReport
    info: InfoReply
    kv: KvEvents
    def __init__(self, deltas: _Optional[_Iterable[_Union[Delta, _Mapping]]] = ..., load: _Optional[_Union[LoadReport, _Mapping]] = ..., info: _Optional[_Union[InfoReply, _Mapping]] = ..., kv: _Optional[_Union[KvEvents, _Mapping]] = ...) -> None: ...
