// Starts `moec lsp` for .moe files. The server does everything (diagnostics,
// hover, completion, go-to-definition, quick fixes); this only launches it.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const config = vscode.workspace.getConfiguration("moe.server");
  const command = config.get("path", "moec");
  const args = ["lsp", ...config.get("extraArgs", [])];
  client = new LanguageClient(
    "moe",
    "moec language server",
    { command, args },
    { documentSelector: [{ scheme: "file", language: "moe" }, { scheme: "untitled", language: "moe" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
