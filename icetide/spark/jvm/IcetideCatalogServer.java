package org.apache.iceberg.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.ForbiddenException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchIcebergTableException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.hadoop.HadoopCatalog;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * icetide's Iceberg REST catalog server (`icetide catalog serve`): the REST protocol's routes on
 * the JDK's HTTP server, each answered by Iceberg's own {@link CatalogHandlers} over one backing
 * catalog (the embedded Hadoop catalog with icetide's commit lock, JDBC, ...). It sits in Iceberg's
 * package because the JSON mapper the protocol's messages need, {@link RESTObjectMapper}, is
 * package-private there.
 *
 * <p>Started by icetide/catalog/server.py with the host and port as arguments and a JSON
 * document on standard input: {"name": catalog name, "properties": {catalog properties}, "token":
 * a bearer token every request must carry, or null} on one line. The settings come on standard input so that
 * a password never shows in the process list. It prints one line, "listening on http://HOST:PORT",
 * once it serves, and exits when its standard input ends (its parent ended). A commit that loses a race answers 409, so the client refreshes and retries.
 */
public class IcetideCatalogServer implements HttpHandler {
  private static final ObjectMapper MAPPER = RESTObjectMapper.mapper();
  private static final List<Endpoint> ENDPOINTS =
      Arrays.asList(
          Endpoint.V1_LIST_NAMESPACES,
          Endpoint.V1_LOAD_NAMESPACE,
          Endpoint.V1_NAMESPACE_EXISTS,
          Endpoint.V1_CREATE_NAMESPACE,
          Endpoint.V1_UPDATE_NAMESPACE,
          Endpoint.V1_DELETE_NAMESPACE,
          Endpoint.V1_LIST_TABLES,
          Endpoint.V1_LOAD_TABLE,
          Endpoint.V1_TABLE_EXISTS,
          Endpoint.V1_CREATE_TABLE,
          Endpoint.V1_UPDATE_TABLE,
          Endpoint.V1_DELETE_TABLE,
          Endpoint.V1_RENAME_TABLE,
          Endpoint.V1_REGISTER_TABLE,
          Endpoint.V1_REPORT_METRICS);

  private final Catalog catalog;
  private final SupportsNamespaces namespaces;
  private final byte[] token;

  IcetideCatalogServer(Catalog catalog, String token) {
    this.catalog = catalog;
    this.namespaces = (SupportsNamespaces) catalog;
    this.token = token == null ? null : ("Bearer " + token).getBytes(StandardCharsets.UTF_8);
  }

  /** Serve `catalog` on host:port (0: any free port) until the process ends. */
  public static HttpServer start(Catalog catalog, String host, int port, String token)
      throws IOException {
    HttpServer server = HttpServer.create(new InetSocketAddress(host, port), 64);
    server.createContext("/", new IcetideCatalogServer(catalog, token));
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.start();
    return server;
  }

  public static void main(String[] args) {
    try {
      BufferedReader stdin =
          new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      JsonNode settings = MAPPER.readTree(stdin.readLine());
      Map<String, String> properties = new HashMap<>();
      Iterator<Map.Entry<String, JsonNode>> fields = settings.get("properties").fields();
      while (fields.hasNext()) {
        Map.Entry<String, JsonNode> field = fields.next();
        properties.put(field.getKey(), field.getValue().asText());
      }
      JsonNode token = settings.get("token");
      Catalog catalog =
          CatalogUtil.buildIcebergCatalog(
              settings.get("name").asText(), properties, new Configuration());
      HttpServer server =
          start(
              catalog,
              args[0],
              Integer.parseInt(args[1]),
              token == null || token.isNull() ? null : token.asText());
      System.out.println(
          "listening on http://" + args[0] + ":" + server.getAddress().getPort());
      System.out.flush();
      // The parent keeps our standard input open: its end, even by SIGKILL, ends the server.
      Thread watch =
          new Thread(
              () -> {
                try {
                  while (stdin.read() != -1) {
                    // nothing else comes
                  }
                } catch (IOException e) {
                  // the parent is gone either way
                }
                System.exit(0);
              });
      watch.setDaemon(true);
      watch.start();
    } catch (Exception e) {
      Throwable cause = e;
      while (cause.getCause() != null && cause.getMessage() == null) {
        cause = cause.getCause();
      }
      System.err.println(cause.getClass().getSimpleName() + ": " + firstLine(cause.getMessage()));
      System.exit(1);
    }
  }

  private static String firstLine(String message) {
    if (message == null) {
      return "";
    }
    int end = message.indexOf('\n');
    return end < 0 ? message : message.substring(0, end);
  }

  @Override
  public void handle(HttpExchange exchange) throws IOException {
    try {
      if (token != null && !authorized(exchange)) {
        throw new NotAuthorizedException("missing or wrong bearer token");
      }
      Object response = route(exchange);
      if (response == null) {
        exchange.sendResponseHeaders(204, -1);
      } else {
        send(exchange, 200, MAPPER.writeValueAsBytes(response));
      }
    } catch (Exception e) {
      int code = statusOf(e);
      ErrorResponse error =
          ErrorResponse.builder()
              .responseCode(code)
              .withType(e.getClass().getSimpleName())
              .withMessage(e.getMessage() == null ? e.toString() : e.getMessage())
              .build();
      send(exchange, code, MAPPER.writeValueAsBytes(error));
    } finally {
      exchange.close();
    }
  }

  private boolean authorized(HttpExchange exchange) {
    String given = exchange.getRequestHeaders().getFirst("Authorization");
    return given != null
        && MessageDigest.isEqual(token, given.trim().getBytes(StandardCharsets.UTF_8));
  }

  private static void send(HttpExchange exchange, int code, byte[] body) throws IOException {
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    if ("HEAD".equals(exchange.getRequestMethod())) {
      exchange.sendResponseHeaders(code, -1);
      return;
    }
    exchange.sendResponseHeaders(code, body.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(body);
    }
  }

  private static int statusOf(Exception e) {
    if (e instanceof IllegalArgumentException || e instanceof ValidationException) {
      return 400;
    } else if (e instanceof NotAuthorizedException) {
      return 401;
    } else if (e instanceof ForbiddenException) {
      return 403;
    } else if (e instanceof NoSuchNamespaceException
        || e instanceof NoSuchTableException
        || e instanceof NoSuchIcebergTableException
        || e instanceof RouteNotFound) {
      return 404;
    } else if (e instanceof UnsupportedOperationException) {
      return 406;
    } else if (e instanceof AlreadyExistsException
        || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    } else if (e instanceof CommitStateUnknownException) {
      return 500;
    }
    return 500;
  }

  private static final class RouteNotFound extends RuntimeException {
    RouteNotFound(String what) {
      super("no such route: " + what);
    }
  }

  private static Map<String, String> query(HttpExchange exchange) {
    Map<String, String> out = new HashMap<>();
    String raw = exchange.getRequestURI().getRawQuery();
    if (raw == null || raw.isEmpty()) {
      return out;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      String key = eq < 0 ? pair : pair.substring(0, eq);
      String value = eq < 0 ? "" : pair.substring(eq + 1);
      out.put(
          URLDecoder.decode(key, StandardCharsets.UTF_8),
          URLDecoder.decode(value, StandardCharsets.UTF_8));
    }
    return out;
  }

  private static <T> T body(HttpExchange exchange, Class<T> type) throws IOException {
    try (InputStream in = exchange.getRequestBody()) {
      return MAPPER.readValue(in, type);
    }
  }

  private static void drain(HttpExchange exchange) throws IOException {
    try (InputStream in = exchange.getRequestBody()) {
      in.readAllBytes();
    }
  }

  @SuppressWarnings("unchecked")
  private Object route(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    List<String> path = new ArrayList<>();
    for (String part : exchange.getRequestURI().getRawPath().split("/")) {
      if (!part.isEmpty()) {
        path.add(part);
      }
    }
    String what = method + " " + exchange.getRequestURI().getRawPath();
    if (path.isEmpty() || !"v1".equals(path.get(0))) {
      throw new RouteNotFound(what);
    }
    List<String> p = path.subList(1, path.size());
    int n = p.size();
    Map<String, String> query = query(exchange);

    if (n == 1 && p.get(0).equals("config") && method.equals("GET")) {
      return ConfigResponse.builder().withEndpoints(ENDPOINTS).build();
    }
    if (n == 2 && p.get(0).equals("oauth") && p.get(1).equals("tokens") && method.equals("POST")) {
      // Clients configured with a `credential` fetch a token first; this server checks the
      // bearer token itself (when it has one), so it only hands the client's secret back.
      drain(exchange);
      throw new UnsupportedOperationException(
          "this catalog takes a bearer token (`token`), not OAuth2 client credentials");
    }
    if (n == 2 && p.get(0).equals("tables") && p.get(1).equals("rename") && method.equals("POST")) {
      CatalogHandlers.renameTable(catalog, body(exchange, RenameTableRequest.class));
      return null;
    }
    if (n < 1 || !p.get(0).equals("namespaces")) {
      throw new RouteNotFound(what);
    }
    if (n == 1) {
      if (method.equals("GET")) {
        Namespace parent =
            query.containsKey("parent")
                ? Namespace.of(query.get("parent").split("\u001f"))
                : Namespace.empty();
        if (query.containsKey("pageSize")) {
          return CatalogHandlers.listNamespaces(
              namespaces, parent, query.get("pageToken"), query.get("pageSize"));
        }
        return CatalogHandlers.listNamespaces(namespaces, parent);
      } else if (method.equals("POST")) {
        CreateNamespaceRequest request = body(exchange, CreateNamespaceRequest.class);
        if (catalog instanceof HadoopCatalog) {
          // The Hadoop catalog keeps no namespace properties and refuses any (Spark sends its
          // `owner`): the namespace is created without them, as a Spark session on it does.
          request = CreateNamespaceRequest.builder().withNamespace(request.namespace()).build();
        }
        return CatalogHandlers.createNamespace(namespaces, request);
      }
      throw new RouteNotFound(what);
    }
    Namespace ns = RESTUtil.decodeNamespace(p.get(1), RESTUtil.NAMESPACE_SEPARATOR_URLENCODED_UTF_8);
    if (n == 2) {
      switch (method) {
        case "GET":
          return CatalogHandlers.loadNamespace(namespaces, ns);
        case "HEAD":
          CatalogHandlers.namespaceExists(namespaces, ns);
          return null;
        case "DELETE":
          CatalogHandlers.dropNamespace(namespaces, ns);
          return null;
        default:
          throw new RouteNotFound(what);
      }
    }
    if (n == 3 && p.get(2).equals("properties") && method.equals("POST")) {
      return CatalogHandlers.updateNamespaceProperties(
          namespaces, ns, body(exchange, UpdateNamespacePropertiesRequest.class));
    }
    if (n == 3 && p.get(2).equals("register") && method.equals("POST")) {
      return CatalogHandlers.registerTable(
          catalog, ns, body(exchange, RegisterTableRequest.class));
    }
    if (n == 3 && p.get(2).equals("tables")) {
      if (method.equals("GET")) {
        if (query.containsKey("pageSize")) {
          return CatalogHandlers.listTables(
              catalog, ns, query.get("pageToken"), query.get("pageSize"));
        }
        return CatalogHandlers.listTables(catalog, ns);
      } else if (method.equals("POST")) {
        CreateTableRequest request = body(exchange, CreateTableRequest.class);
        request.validate();
        if (request.stageCreate()) {
          return CatalogHandlers.stageTableCreate(catalog, ns, request);
        }
        return CatalogHandlers.createTable(catalog, ns, request);
      }
      throw new RouteNotFound(what);
    }
    if (n < 4 || !p.get(2).equals("tables")) {
      throw new RouteNotFound(what);
    }
    TableIdentifier ident = TableIdentifier.of(ns, RESTUtil.decodeString(p.get(3)));
    if (n == 4) {
      switch (method) {
        case "GET":
          // `snapshots=refs` asks for the snapshots that branches and tags reference only.
          RESTCatalogProperties.SnapshotMode mode =
              "refs".equalsIgnoreCase(query.getOrDefault("snapshots", "all"))
                  ? RESTCatalogProperties.SnapshotMode.REFS
                  : RESTCatalogProperties.SnapshotMode.ALL;
          return CatalogHandlers.loadTable(catalog, ident, mode);
        case "HEAD":
          CatalogHandlers.tableExists(catalog, ident);
          return null;
        case "POST":
          return CatalogHandlers.updateTable(catalog, ident, body(exchange, UpdateTableRequest.class));
        case "DELETE":
          if (Boolean.parseBoolean(query.getOrDefault("purgeRequested", "false"))) {
            CatalogHandlers.purgeTable(catalog, ident);
          } else {
            CatalogHandlers.dropTable(catalog, ident);
          }
          return null;
        default:
          throw new RouteNotFound(what);
      }
    }
    if (n == 5 && p.get(4).equals("metrics") && method.equals("POST")) {
      drain(exchange); // scan and commit reports: accepted, not kept
      return null;
    }
    throw new RouteNotFound(what);
  }
}
