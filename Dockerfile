# karpy controller image: non-root, runs `karpy run`; configuration comes from environment variables.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY karpy ./karpy
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["karpy"]
CMD ["run"]
