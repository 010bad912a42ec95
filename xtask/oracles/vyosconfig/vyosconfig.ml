(* VyOS's own reading of config.boot text, for the project's differential tests.

   Protocol, so one process serves many cases: stdin holds cases, each a line
   with its length in bytes and then exactly that many bytes of config text;
   for each case stdout gets one JSON line:
     {"ok":true,"commands":"<Config_tree.render_commands of the tree>"}
     {"ok":false,"error":"<VyOS's message>","line":L,"column":C}
   (line and column are absent when VyOS gives none).

   Comments are dropped from the tree before rendering: the project reads
   no comments (docs/vyos-config-reading.md), and render_commands writes a
   comment unescaped, on its own line, where it could pass for a command. *)

open Vyos1x

let rec without_comments node =
  let data = Vytree.data_of_node node in
  let children = List.map without_comments (Vytree.children_of_node node) in
  Vytree.make_full { data with Config_tree.comment = None } (Vytree.name_of_node node) children

let verdict text =
  match Parser.from_string text with
  | tree ->
      let commands = Config_tree.render_commands (without_comments tree) [] in
      `Assoc [ ("ok", `Bool true); ("commands", `String commands) ]
  | exception Util.Syntax_error (position, message) ->
      let where =
        match position with
        | Some (line, column) -> [ ("line", `Int line); ("column", `Int column) ]
        | None -> []
      in
      `Assoc ([ ("ok", `Bool false); ("error", `String message) ] @ where)
  | exception Failure message -> `Assoc [ ("ok", `Bool false); ("error", `String message) ]

let () =
  let rec loop () =
    match input_line stdin with
    | exception End_of_file -> ()
    | header ->
        let length = int_of_string (String.trim header) in
        let text = really_input_string stdin length in
        print_endline (Yojson.Safe.to_string (verdict text));
        flush stdout;
        loop ()
  in
  loop ()
