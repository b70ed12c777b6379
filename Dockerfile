FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STATIC_ROOT=/app/staticfiles
WORKDIR /app
COPY pyproject.toml README.md ./
COPY reviewhub reviewhub
COPY elicitation elicitation
COPY reviewhub_client reviewhub_client
COPY templates templates
COPY static static
COPY manage.py ./
RUN pip install --no-cache-dir . && SECRET_KEY=build-only python manage.py collectstatic --noinput
RUN useradd --system reviewhub
USER reviewhub
EXPOSE 8000
CMD ["python", "-m", "uvicorn", "reviewhub.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--backlog", "4096", "--timeout-graceful-shutdown", "10"]
