"""An OpenTelemetry SDK wired to in-memory readers, one per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from interlock.otel import Telemetry


@dataclass
class Otel:
    """The SDK of one test: its providers, the spans ended so far, the metrics."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def telemetry(self) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` (every scope), as collected now."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found

    def total(self, metric: str, **labels: str) -> float:
        """The sum of a counter's points whose attributes include ``labels``."""
        return sum(
            p.value
            for p in self.points(metric)
            if all(p.attributes.get(k) == v for k, v in labels.items())
        )


@pytest.fixture(autouse=True)
def sdk_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK on, whatever another test module set at import: some frameworks' tests
    (Google ADK's, CrewAI's) set ``OTEL_SDK_DISABLED=true`` for the whole process, and
    an SDK provider made then records nothing (and a subprocess would inherit it)."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(tracer_provider, meter_provider, exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()
