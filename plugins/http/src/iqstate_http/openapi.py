"""The OpenAPI 3.1 document of the service (served at `/openapi.json`)."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_ERRORS = {
    code: {**_ERROR, "description": text}
    for code, text in {
        "400": "malformed request, unknown query type, or a key that does not parse",
        "401": "missing or wrong bearer token",
        "404": "unknown store",
        "413": "request body too large",
        "503": "the application is not running, or the partition cannot answer",
    }.items()
}
_JSON_ANY: dict[str, Any] = {}
_POSITION = {
    "type": "object",
    "additionalProperties": {"type": "object", "additionalProperties": {"type": "integer"}},
}


def _get(summary: str, schema: dict[str, Any], parameters: list[str]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in parameters
            ],
            "responses": {
                "200": {"description": "ok", "content": {"application/json": {"schema": schema}}},
                **_ERRORS,
            },
        }
    }


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "iqstate query service", "version": "1"},
    "paths": {
        "/v1/health": _get("whether the application is running", {"type": "object"}, []),
        "/v1/query": {
            "post": {
                "summary": "run an IQv2 request",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/QueryRequest"}
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "per-partition results",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/QueryResponse"}
                            }
                        },
                    },
                    **_ERRORS,
                },
            }
        },
        "/v1/stores/{store}/keys/{key}": _get(
            "look a key up",
            {
                "type": "object",
                "required": ["value", "partition", "position"],
                "properties": {
                    "value": _JSON_ANY,
                    "partition": {"type": "integer"},
                    "position": _POSITION,
                },
            },
            ["store", "key"],
        ),
        "/v1/metadata": _get("every instance and what it hosts", {"type": "array"}, []),
        "/v1/metadata/stores/{store}": _get(
            "instances hosting a store", {"type": "array"}, ["store"]
        ),
        "/v1/metadata/stores/{store}/keys/{key}": _get(
            "where a key lives", {"type": "object"}, ["store", "key"]
        ),
        "/v1/lags": _get("local partitions' changelog lag", {"type": "object"}, []),
        "/v1/partitions": _get("local partitions: role and position", {"type": "array"}, []),
    },
    "components": {
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    }
                },
            },
            "Query": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {
                        "type": "string",
                        "description": "key, range, window_key, window_range, or a plugin's",
                    },
                    "key": _JSON_ANY,
                    "skip_cache": {"type": "boolean"},
                    "lower": _JSON_ANY,
                    "upper": _JSON_ANY,
                    "order": {"enum": ["any", "ascending", "descending"]},
                    "time_from": {"type": "integer"},
                    "time_to": {"type": "integer"},
                },
            },
            "QueryRequest": {
                "type": "object",
                "required": ["store", "query"],
                "properties": {
                    "store": {"type": "string"},
                    "query": {"$ref": "#/components/schemas/Query"},
                    "partitions": {
                        "type": ["array", "null"],
                        "items": {"type": "integer", "minimum": 0},
                    },
                    "bound": {"oneOf": [_POSITION, {"type": "null"}]},
                    "require_active": {"type": "boolean"},
                    "execution_info": {"type": "boolean"},
                },
            },
            "QueryResponse": {
                "type": "object",
                "required": ["store", "partitions", "position"],
                "properties": {
                    "store": {"type": "string"},
                    "position": _POSITION,
                    "partitions": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "required": ["ok", "position"],
                            "properties": {
                                "ok": {"type": "boolean"},
                                "value": _JSON_ANY,
                                "failure": {"type": "string"},
                                "message": {"type": "string"},
                                "position": {"oneOf": [_POSITION, {"type": "null"}]},
                                "execution_info": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        }
    },
}
