(* Glue between flat int arrays (the C ABI) and the extracted core.
   It decodes, calls and encodes; it decides nothing. It does refuse input
   outside the domain where extracted naturals are sound (negative ints,
   more than 2^20 devices, more than 2^50 elements), so that the core never
   sees a value its proofs do not cover. *)
open Verishard_core

exception Bad_input of string

(* A growable int buffer. It starts at 160 ints (a plan's answer over up to
   four dimensions usually fits: 66-144 on bench/planner_callgrind.py's
   problems) and doubles. *)
module Buffer = struct
  type t = { mutable data : int array; mutable len : int }
  let create () = { data = Array.make 160 0; len = 0 }
  let grow b = let d = Array.make (2 * b.len) 0 in Array.blit b.data 0 d 0 b.len; b.data <- d
  let add_int b x =
    if b.len = Array.length b.data then grow b;
    Array.unsafe_set b.data b.len x; b.len <- b.len + 1
  let contents b = Array.sub b.data 0 b.len
end

let max_devices = 1 lsl 20
let max_elements = 1 lsl 50

let reader (a : int array) =
  let pos = ref 0 in
  fun () ->
    if !pos >= Array.length a then raise (Bad_input "input ends early");
    let x = a.(!pos) in
    incr pos;
    if x < 0 then raise (Bad_input "negative number");
    x

let list_of next n = let rec go k acc = if k = 0 then List.rev acc else go (k - 1) (next () :: acc) in go n []

(* Whether the product of the nonzero numbers of [xs] is at most [limit]
   (zeros are left to the core, which refuses them). Each step is checked
   before it multiplies, so the product never wraps: two sizes of 2^40
   would wrap a 63-bit int to 0. Under the limit, every product of some of
   [xs] is under it too. *)
let within limit xs =
  List.fold_left (fun acc n -> if n = 0 then acc else if acc > limit / n then limit + 1 else acc * n) 1 xs
  <= limit

let check_within limit what xs = if not (within limit xs) then raise (Bad_input ("more than " ^ what))

let check_devices = check_within max_devices "2^20 devices"

let read_mesh next : mesh =
  let m = list_of next (next ()) in
  check_devices m;
  m

let read_dim next = let g = next () in let axes = list_of next (next ()) in { axes; gsize = g }

let read_type next : atype =
  let t = list_of (fun () -> read_dim next) (next ()) in
  check_within max_elements "2^50 elements" (List.map (fun d -> d.gsize) t);
  t

let read_coll next =
  match next () with
  | 0 -> let d = next () in AllGather (d, list_of next (next ()))
  | 1 -> let d = next () in DynSlice (d, list_of next (next ()))
  | 2 -> let d = next () in let e = next () in AllToAll (d, e, list_of next (next ()))
  | 3 -> AllPermute (read_type next)
  | _ -> raise (Bad_input "unknown collective tag")

let read_plan next : plan = list_of (fun () -> read_coll next) (next ())

(* A partial type: its pending axes, then its array type. *)
let read_ptype next : ptype = let p = list_of next (next ()) in { paxes = p; ptyp = read_type next }

let read_pcoll next =
  match next () with
  | 4 -> AllReduce (list_of next (next ()))
  | 5 -> let d = next () in ReduceScatter (d, list_of next (next ()))
  | 6 -> ToPartial (list_of next (next ()))
  | tag -> (* tags 0-3: the four collectives, as [read_coll] reads them *)
      let first = ref true in
      PColl (read_coll (fun () -> if !first then (first := false; tag) else next ()))

let read_pplan next : pplan = list_of (fun () -> read_pcoll next) (next ())

let rec put_ints buf = function [] -> () | x :: l -> Buffer.add_int buf x; put_ints buf l

let put_axes buf xs = Buffer.add_int buf (List.length xs); put_ints buf xs

let rec put_dims buf = function
  | [] -> ()
  | d :: t -> Buffer.add_int buf d.gsize; put_axes buf d.axes; put_dims buf t

let put_type buf (t : atype) = Buffer.add_int buf (List.length t); put_dims buf t

let put_coll buf = function
  | AllGather (d, xs) -> Buffer.add_int buf 0; Buffer.add_int buf d; put_axes buf xs
  | DynSlice (d, xs) -> Buffer.add_int buf 1; Buffer.add_int buf d; put_axes buf xs
  | AllToAll (d, e, xs) -> Buffer.add_int buf 2; Buffer.add_int buf d; Buffer.add_int buf e; put_axes buf xs
  | AllPermute t -> Buffer.add_int buf 3; put_type buf t

let put_ptype buf (pt : ptype) = put_axes buf pt.paxes; put_type buf pt.ptyp

let put_pcoll buf = function
  | PColl c -> put_coll buf c
  | AllReduce xs -> Buffer.add_int buf 4; put_axes buf xs
  | ReduceScatter (d, xs) -> Buffer.add_int buf 5; Buffer.add_int buf d; put_axes buf xs
  | ToPartial xs -> Buffer.add_int buf 6; put_axes buf xs

(* Reason codes: constructors of Rules.error in order, with their argument. *)
let error_code = function
  | BadDim d -> (0, d) | NoAxes -> (1, 0) | NotMinorAxes -> (2, 0) | AxisOutOfRange a -> (3, a)
  | RepeatedAxis -> (4, 0) | AxisInUse a -> (5, a) | NotDivisible -> (6, 0) | SameDim -> (7, 0)
  | BadTarget -> (8, 0) | ShapeChanged -> (9, 0) | BadMesh -> (10, 0) | BadSource -> (11, 0)
  | BadDest -> (12, 0) | GlobalShapeMismatch -> (13, 0) | WrongResult -> (14, 0)

(* Partial.perror: Rules.error's codes, then 15 (not pending) and 16 (pending). *)
let perror_code = function
  | CollError e -> error_code e | NotPending a -> (15, a) | AxisPending a -> (16, a)

let finish buf = Buffer.contents buf

(* A checker's report, plain or partial: [0; peak; s; s+1 types; s received counts]. *)
let put_report buf put_t peak s ts rs =
  List.iter (Buffer.add_int buf) [0; peak; s];
  List.iter (put_t buf) ts;
  List.iter (Buffer.add_int buf) rs

(* [x] encoded by [encode], preceded by the length of its encoding. *)
let put_sized buf encode x =
  let at = buf.Buffer.len in
  Buffer.add_int buf 0;
  encode buf x;
  buf.Buffer.data.(at) <- buf.Buffer.len - at - 1

(* A pipeline's answer, plain or partial: [0; k; (len; sizes..) for each of
   the k parts (the split); peak; s; the source type; then each of the s
   steps as one record: its collective, the type after it and what it
   receives], the source type and each record preceded by the length of its
   encoding (a record is the unit Python reads back, and caches). *)
let put_planned buf put_step put_t fs peak p ts rs =
  Buffer.add_int buf 0;
  Buffer.add_int buf (List.length fs);
  let rec axes_each = function [] -> () | xs :: l -> put_axes buf xs; axes_each l in
  axes_each fs;
  Buffer.add_int buf peak;
  Buffer.add_int buf (List.length p);
  let put_record buf (c, (t, n)) = put_step buf c; put_t buf t; Buffer.add_int buf n in
  let rec records = function
    | c :: p', t :: ts', n :: rs' -> put_sized buf put_record (c, (t, n)); records (p', ts', rs')
    | _ -> () in
  match ts with
  | t0 :: ts' -> put_sized buf put_t t0; records (p, ts', rs)
  | [] -> ()

let check_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let p = read_plan next in
  let buf = Buffer.create () in
  (match check m src dst p with
   | Ok r -> put_report buf put_type r.peak (List.length p) r.types r.received
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]);
  finish buf

let synthesize_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let (guaranteed, p) = synthesize_best m src dst in
  let buf = Buffer.create () in
  Buffer.add_int buf (if guaranteed then 1 else 0);
  Buffer.add_int buf (List.length p);
  List.iter (put_coll buf) p;
  finish buf

let blocks_fn a =
  let next = reader a in
  let m = read_mesh next in let t = read_type next in
  Array.of_list (block_starts m t)

let permute_fn a =
  let next = reader a in
  let m = read_mesh next in let t = read_type next in let t' = read_type next in
  Array.of_list (permute_table m t t')

let movement_fn a =
  let next = reader a in
  let m = read_mesh next in let t = read_type next in let op = read_coll next in
  let t' = read_type next in
  Array.of_list (movement m t op t')

(* The one planning call, [Pipeline.plan_problem]. Answer: [1; step; reason;
   detail] on error, else the plan as [put_planned] writes it. *)
let plan_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let buf = Buffer.create () in
  (match plan_problem m src dst with
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]
   | Ok ((fs, p), r) -> put_planned buf put_coll put_type fs r.peak p r.types r.received);
  finish buf

(* [Pchecker.pcheck]: as [check_fn], with partial types and steps. *)
let pcheck_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_ptype next in let dst = read_ptype next in
  let p = read_pplan next in
  let buf = Buffer.create () in
  (match pcheck m src dst p with
   | Ok r -> put_report buf put_ptype r.ppeak (List.length p) r.ptypes r.preceived
   | Err (i, e) -> let (c, x) = perror_code e in List.iter (Buffer.add_int buf) [1; i; c; x]);
  finish buf

(* The one planning call, [Ppipeline.pplan_problem]: as [plan_fn], with
   partial types and steps. *)
let pplan_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_ptype next in let dst = read_ptype next in
  let buf = Buffer.create () in
  (match pplan_problem m src dst with
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]
   | Ok ((fs, p), r) -> put_planned buf put_pcoll put_ptype fs r.ppeak p r.ptypes r.preceived);
  finish buf

(* [Uchecker.ucheck]: as [check_fn], over uneven types (report peak: the
   largest padded buffer; received counts on padded buffers). *)
let ucheck_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let p = read_plan next in
  let buf = Buffer.create () in
  (match ucheck m src dst p with
   | Ok r -> put_report buf put_type r.upeak (List.length p) r.utypes r.ureceived
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]);
  finish buf

(* The one planning call for uneven types, [Upipeline.uplan_problem]: as [plan_fn]. *)
let uplan_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let buf = Buffer.create () in
  (match uplan_problem m src dst with
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]
   | Ok ((fs, p), r) -> put_planned buf put_coll put_type fs r.upeak p r.utypes r.ureceived);
  finish buf

(* [Uchecker.umovement]: as [movement_fn] over padded buffers; fresh padding
   is the pair (number of devices, 0). *)
let umovement_fn a =
  let next = reader a in
  let m = read_mesh next in let t = read_type next in let op = read_coll next in
  let t' = read_type next in
  Array.of_list (umovement m t op t')

(* [Utraffic.ulower_bound]: the transfer lower bound over uneven types. *)
let ulower_bound_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  [| ulower_bound m src dst |]

let lower_bound_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  [| lower_bound m src dst |]

(* [Certify.certify_split]: mesh; split (per axis: count; sub-axis sizes); cap; figure;
   src; dst (over the mesh); n; n entries (figure, type over the split).
   Answer: [1] when the certificate proves the figure minimal within the cap, else [0]. *)
let certify_fn a =
  let next = reader a in
  let m = read_mesh next in
  let fs = list_of (fun () -> list_of next (next ())) (next ()) in
  check_devices (List.concat fs);   (* the split is a mesh too: [map prod fs] must not wrap *)
  let cap = next () in let t = next () in
  let src = read_type next in let dst = read_type next in
  let cert = list_of (fun () -> let d = next () in let u = read_type next in (u, d)) (next ()) in
  [| if certify_split m fs src dst cap t cert then 1 else 0 |]

(* Steps of plans over partial uneven types ([Puchecker.pustep]): tags 0-3
   the four collectives, as [read_coll] reads them; 4 all-reduce, 5
   reduce-scatter, 6 make-pending (as [read_pcoll]); 7 then the target
   type: the exchange. *)
let read_pustep next =
  match next () with
  | 4 -> PUReduce (list_of next (next ()))
  | 5 -> let d = next () in PUScatterTo (d, list_of next (next ()))
  | 6 -> PUPending (list_of next (next ()))
  | 7 -> PUExch (read_type next)
  | tag -> let first = ref true in
      PUColl (read_coll (fun () -> if !first then (first := false; tag) else next ()))

let put_pustep buf = function
  | PUColl c -> put_coll buf c
  | PUReduce xs -> Buffer.add_int buf 4; put_axes buf xs
  | PUScatterTo (d, xs) -> Buffer.add_int buf 5; Buffer.add_int buf d; put_axes buf xs
  | PUPending xs -> Buffer.add_int buf 6; put_axes buf xs
  | PUExch t -> Buffer.add_int buf 7; put_type buf t

(* [Puchecker.puerror]: [1; kind; step; reason; detail], kind 0 the problem,
   1 the reduction, 2 the make-pending, 3 a step out of place, 4 the uneven
   checker's reason (step numbered within the middle steps). *)
let put_puerror buf e =
  let (k, i, c, x) = match e with
    | PUBadProblem -> (0, 0, 0, 0) | PUBadReduction -> (1, 0, 0, 0) | PUBadPending -> (2, 0, 0, 0)
    | PUMisplaced -> (3, 0, 0, 0) | PUMid (i, e) -> let (c, x) = error_code e in (4, i, c, x) in
  List.iter (Buffer.add_int buf) [1; k; i; c; x]

(* [Puchecker.pucheck]: mesh; src; dst (partial types); n; n steps. Answer:
   the report as [put_report] writes it (partial types), or [put_puerror]. *)
let pucheck_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_ptype next in let dst = read_ptype next in
  let p = list_of (fun () -> read_pustep next) (next ()) in
  let buf = Buffer.create () in
  (match pucheck m src dst p with
   | Ok r -> put_report buf put_ptype r.pupeak (List.length p) r.putypes r.pureceived
   | Err e -> put_puerror buf e);
  finish buf

(* [Puchecker.puplan_checked]: the planner's plan through the checker.
   Answer: [0; s; s steps], then the checker's report as [pucheck_fn]
   writes it; or [put_puerror]. *)
let puplan_checked_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_ptype next in let dst = read_ptype next in
  let buf = Buffer.create () in
  (match puplan_checked m src dst with
   | Ok (p, r) ->
       Buffer.add_int buf 0; Buffer.add_int buf (List.length p); List.iter (put_pustep buf) p;
       put_report buf put_ptype r.pupeak (List.length p) r.putypes r.pureceived
   | Err e -> put_puerror buf e);
  finish buf

(* The exchange's free dimension on the wire: [d + 1], or 0 for none. *)
let opt_dim = function Some d -> d + 1 | None -> 0

(* [Eminimal.emplan_problem], [plan(..., minimal=True)] in one call
   ([Minimal.mplan_problem], then the exchange where it receives less).
   Input: mesh; src; dst; 0 (the pipeline's plan) or 1 and a plan over the
   prime sub-axes of size 2 or more; n; n certificate entries (figure, type
   over those sub-axes). Answer: as [plan_fn] when it keeps the plan of
   collectives; [4; ch; peak; received] when it takes the exchange (as
   [put_eplanned]'s [2; ...]); [1; step; reason; detail] when the checker
   refuses the plan; [2; peak] when a type along it is above the bound;
   [3; traffic] when the certificate does not prove its traffic least
   within the bound (and the exchange does not receive less). *)
let mplan_fn a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let cand = match next () with 0 -> None | 1 -> Some (read_plan next) | _ -> raise (Bad_input "unknown candidate tag") in
  let cert = list_of (fun () -> let d = next () in let u = read_type next in (u, d)) (next ()) in
  let buf = Buffer.create () in
  (match emplan_problem m src dst cand cert with
   | Ok (Collectives (fs, p, r)) -> put_planned buf put_coll put_type fs r.peak p r.types r.received
   | Ok (Exchanged (ch, rx)) -> List.iter (Buffer.add_int buf) [4; opt_dim ch; bound m src dst; rx]
   | Err (MRefused (i, e)) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]
   | Err (MAboveCap pk) -> List.iter (Buffer.add_int buf) [2; pk]
   | Err (MNotLeast t) -> List.iter (Buffer.add_int buf) [3; t]);
  finish buf

(* [Crossmesh.xplan], the cross-mesh schedule builder, or [Balance.xplan_bal]
   (its moved pieces of each block dealt over the block's holders from
   holder [start]). Input ([read_xplan]): mesh1; ranks1 (n; ranks); type1;
   mesh2; ranks2; type2; deal ([0]: [xplan]; [start + 1]: [xplan_bal]). Answer: [1] when it refuses, else
   [0; number of targets; for each target: number of pieces; for each piece:
   sending rank, then per dimension: source block, global start, length]. *)
let read_xplan next =
  let m1 = read_mesh next in let r1 = list_of next (next ()) in let t1 = read_type next in
  let m2 = read_mesh next in let r2 = list_of next (next ()) in let t2 = read_type next in
  let deal = next () in
  if deal > max_elements then raise (Bad_input "a rotation outside 0..2^50");
  ((if deal = 0 then xplan m1 r1 t1 m2 r2 t2 else xplan_bal m1 r1 t1 m2 r2 t2 (deal - 1)), r2)

let xplan_fn a =
  let next = reader a in
  let buf = Buffer.create () in
  (match fst (read_xplan next) with
   | None -> Buffer.add_int buf 1
   | Some pss ->
       Buffer.add_int buf 0; Buffer.add_int buf (List.length pss);
       List.iter (fun ps ->
         Buffer.add_int buf (List.length ps);
         List.iter (fun q ->
           Buffer.add_int buf q.psrc;
           List.iter2 (fun k (s, l) -> Buffer.add_int buf k; Buffer.add_int buf s; Buffer.add_int buf l)
             q.pcell q.pbox) ps) pss);
  finish buf

(* [Rounds.xrounds] on [Crossmesh.xplan]'s or [Balance.xplan_bal]'s schedule: the staged transfers.
   Input: budget (elements per rank and round); then xplan's input. Answer:
   [1] when xplan refuses, else [0; number of rounds; for each round: number
   of cuts; for each cut: sending rank, receiving rank, target index, number
   of dimensions, then per dimension: global start, length]. *)
let xrounds_fn a =
  let next = reader a in
  let budget = next () in
  (* a round's load stays below budget + one cut: under 2^51 within this bound *)
  if budget > max_elements then raise (Bad_input "a budget of more than 2^50 elements");
  let (sched, r2) = read_xplan next in
  let buf = Buffer.create () in
  (match sched with
   | None -> Buffer.add_int buf 1
   | Some pss ->
       let rs = xrounds budget r2 pss in
       Buffer.add_int buf 0; Buffer.add_int buf (List.length rs);
       List.iter (fun rd ->
         Buffer.add_int buf (List.length rd);
         List.iter (fun c ->
           Buffer.add_int buf c.csrc; Buffer.add_int buf c.cdst; Buffer.add_int buf c.ctgt;
           Buffer.add_int buf (List.length c.cbox);
           List.iter (fun (s, l) -> Buffer.add_int buf s; Buffer.add_int buf l) c.cbox) rd) rs);
  finish buf

let put_piece buf q =
  Buffer.add_int buf q.psrc;
  List.iter2 (fun k (s, l) -> Buffer.add_int buf k; Buffer.add_int buf s; Buffer.add_int buf l) q.pcell q.pbox

(* [Perrank.wplan]: the world schedule assembled from every target's own
   receive list (senders dealt from holder [start]). Input: xplan's input,
   the last number [start]. Answer: as [xplan_fn]'s. *)
let wplan_fn a =
  let next = reader a in
  let m1 = read_mesh next in let r1 = list_of next (next ()) in let t1 = read_type next in
  let m2 = read_mesh next in let r2 = list_of next (next ()) in let t2 = read_type next in
  let start = next () in
  if start > max_elements then raise (Bad_input "a rotation outside 0..2^50");
  let buf = Buffer.create () in
  (match wplan m1 r1 t1 m2 r2 t2 start with
   | None -> Buffer.add_int buf 1
   | Some pss ->
       Buffer.add_int buf 0; Buffer.add_int buf (List.length pss);
       List.iter (fun ps -> Buffer.add_int buf (List.length ps); List.iter (put_piece buf) ps) pss);
  finish buf

(* [Perrank.rank_recv] and [Perrank.rank_send]: one rank's own part, and
   each moved piece's cuts ([Rounds.cut_box]). Input: budget (elements per
   cut); xplan's input with [start]; then target device + 1 (0: none),
   source device + 1 (0: none). Answer: [1] when refused, else [0; number
   of pieces received; each: sending rank, per dimension: source block,
   start, length, then its number of cuts (none where the rank holds it)
   and per cut, per dimension: start, length]; then [number of pieces sent;
   each: target device, receiving rank, the piece as above, its cuts]. *)
let xrank_fn a =
  let next = reader a in
  let budget = next () in
  if budget > max_elements then raise (Bad_input "a budget of more than 2^50 elements");
  let m1 = read_mesh next in let r1 = list_of next (next ()) in let t1 = read_type next in
  let m2 = read_mesh next in let r2 = list_of next (next ()) in let t2 = read_type next in
  let start = next () in
  if start > max_elements then raise (Bad_input "a rotation outside 0..2^50");
  let j = next () in let i = next () in
  if j > max_devices || i > max_devices then raise (Bad_input "a device index past 2^20");
  let put_cuts buf b =
    let cs = cut_box budget b in
    Buffer.add_int buf (List.length cs);
    List.iter (List.iter (fun (s, l) -> Buffer.add_int buf s; Buffer.add_int buf l)) cs in
  let recv = if j = 0 then Some [] else rank_recv m1 r1 t1 m2 r2 t2 start (j - 1) in
  let send = if i = 0 then Some [] else rank_send m1 r1 t1 m2 r2 t2 start (i - 1) in
  let buf = Buffer.create () in
  (match recv, send with
   | Some ps, Some sl ->
       let r2a = Array.of_list r2 in
       let self = if j = 0 then -1 else r2a.(j - 1) in
       Buffer.add_int buf 0; Buffer.add_int buf (List.length ps);
       List.iter (fun q ->
         put_piece buf q;
         if q.psrc = self then Buffer.add_int buf 0 else put_cuts buf q.pbox) ps;
       Buffer.add_int buf (List.length sl);
       List.iter (fun (t, q) ->
         Buffer.add_int buf t; Buffer.add_int buf r2a.(t); put_piece buf q; put_cuts buf q.pbox) sl
   | _ -> Buffer.add_int buf 1);
  finish buf

(* [Rankrounds.rank_rounds]: the rounds of one rank's cuts. Input: world
   size, budget (bytes), n; n times: sender rank, receiver rank, bytes.
   Answer: [number of rounds; each: round number, number of cuts, each
   cut's index in the input]. *)
let rank_rounds_fn a =
  let next = reader a in
  let world = next () in
  if world > max_devices then raise (Bad_input "a world of more than 2^20 ranks");
  let budget = next () in
  if budget > max_elements then raise (Bad_input "a budget of more than 2^50 bytes");
  let n = next () in
  if n > Array.length a then raise (Bad_input "input ends early");
  let rec read i acc =
    if i = n then List.rev acc else begin
      let s = next () in let r = next () in let b = next () in
      if s >= max_devices || r >= max_devices then raise (Bad_input "a rank past 2^20");
      if b > max_elements then raise (Bad_input "a cut of more than 2^50 bytes");
      read (i + 1) ((((i, s), r), b) :: acc) end in
  let cuts = read 0 [] in
  let rounds = rank_rounds world budget cuts in
  let buf = Buffer.create () in
  Buffer.add_int buf (List.length rounds);
  List.iter (fun (t, cs) ->
    Buffer.add_int buf t; Buffer.add_int buf (List.length cs);
    List.iter (fun (((i, _), _), _) -> Buffer.add_int buf i) cs) rounds;
  finish buf

(* [Boxes.bplan] and [Boxes.brounds]: two layouts as explicit boxes per
   rank over one world. Input: budget (elements per rank and round); k
   dimensions; the source layout, then the target layout, each: n; n times:
   world rank, then per dimension: start, length. Answer: [number of
   targets; for each target: number of pieces; for each piece: sending
   rank, then per dimension: start, length]; then [number of rounds; for
   each round: number of cuts; for each cut: sending rank, receiving rank,
   target index, then per dimension: start, length]. *)
let read_layout next k =
  let n = next () in
  check_devices [n];
  list_of (fun () ->
    let r = next () in
    let b = list_of (fun () -> let s = next () in let l = next () in
                      if s > max_elements || l > max_elements then raise (Bad_input "an index past 2^50");
                      (s, l)) k in
    check_within max_elements "2^50 elements" (List.map snd b);
    (r, b)) n

(* Rounds of cuts: [number of rounds; for each round: number of cuts; for
   each cut: sending rank, receiving rank, target index, then per
   dimension: start, length]. *)
let put_box_rounds buf rs =
  Buffer.add_int buf (List.length rs);
  List.iter (fun rd ->
    Buffer.add_int buf (List.length rd);
    List.iter (fun c ->
      Buffer.add_int buf c.csrc; Buffer.add_int buf c.cdst; Buffer.add_int buf c.ctgt;
      List.iter (fun (s, l) -> Buffer.add_int buf s; Buffer.add_int buf l) c.cbox) rd) rs

let bplan_fn a =
  let next = reader a in
  let budget = next () in
  if budget > max_elements then raise (Bad_input "a budget of more than 2^50 elements");
  let k = next () in
  let srcs = read_layout next k in let tgts = read_layout next k in
  let buf = Buffer.create () in
  let put_box b = List.iter (fun (s, l) -> Buffer.add_int buf s; Buffer.add_int buf l) b in
  let pss = bplan srcs tgts in
  Buffer.add_int buf (List.length pss);
  List.iter (fun ps ->
    Buffer.add_int buf (List.length ps);
    List.iter (fun q -> Buffer.add_int buf q.psrc; put_box q.pbox) ps) pss;
  put_box_rounds buf (brounds budget srcs tgts);
  finish buf

(* [Cover.bcovers]: the box schedule's precondition. Input: k dimensions;
   the global shape (k sizes); the source layout, then the target layout, as
   [bplan_fn] reads them. Answer: [1] when the source layout holds every
   index of the array and every target box lies in it, else [0]. *)
let bcovers_fn a =
  let next = reader a in
  let k = next () in
  let shape = list_of next k in
  check_within max_elements "2^50 elements" shape;
  let srcs = read_layout next k in let tgts = read_layout next k in
  [| if bcovers shape srcs tgts then 1 else 0 |]

(* Plans that may hold an exchange: tag 7 then the target type; tags 0-3
   the four collectives, as [read_coll] reads them. *)
let read_estep next =
  match next () with
  | 7 -> Exch (read_type next)
  | tag -> let first = ref true in
      Coll (read_coll (fun () -> if !first then (first := false; tag) else next ()))

(* A checker's report fields, plain ([Checker.report]) or uneven ([Uchecker.ureport]). *)
let report_fields = ((fun (r : report) -> r.peak), (fun (r : report) -> r.types), (fun (r : report) -> r.received))
let ureport_fields = ((fun (r : ureport) -> r.upeak), (fun (r : ureport) -> r.utypes), (fun (r : ureport) -> r.ureceived))

(* [Exchange.echeck] / [uecheck]: as [check_fn], over plans that may hold an exchange. *)
let echeck_with checker (peak, types, received) a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let p = list_of (fun () -> read_estep next) (next ()) in
  let buf = Buffer.create () in
  (match checker m src dst p with
   | Ok r -> put_report buf put_type (peak r) (List.length p) (types r) (received r)
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]);
  finish buf

(* The one planning call with exchanges allowed, [Exchange.eplan_problem]
   (uneven types: [ueplan_problem]). Answer: as [plan_fn] when it keeps the
   plan of collectives; when it takes the exchange, [2; ch; peak; received]
   ([ch]: [opt_dim] of the free dimension it runs in pieces along; peak and
   received: [bound m src dst] (uneven: [ubound]) and the planner's [rx],
   which [Exchangeproof.eplan_spec] / [ueplan_spec] prove to be the exchange
   checker's report on the one-step plan; neither builds the exchange's
   schedule, a piece per source block each target meets). *)
let put_eplanned buf bound_of (peak, types, received) m src dst = function
  | Collectives (fs, p, r) -> put_planned buf put_coll put_type fs (peak r) p (types r) (received r)
  | Exchanged (ch, rx) -> List.iter (Buffer.add_int buf) [2; opt_dim ch; bound_of m src dst; rx]

let eplan_with planner bound_of peak_fields a =
  let next = reader a in
  let m = read_mesh next in let src = read_type next in let dst = read_type next in
  let buf = Buffer.create () in
  (match planner m src dst with
   | Err (i, e) -> let (c, x) = error_code e in List.iter (Buffer.add_int buf) [1; i; c; x]
   | Ok out -> put_eplanned buf bound_of peak_fields m src dst out);
  finish buf

let echeck_fn = echeck_with echeck report_fields
let uecheck_fn = echeck_with uecheck ureport_fields
let eplan_fn = eplan_with eplan_problem bound report_fields
let ueplan_fn = eplan_with ueplan_problem ubound ureport_fields

(* [Layoutchoice.lplan]: the path for two layouts given as boxes, with
   types optionally proposed. Input: budget; the mesh; 1 then the source and
   target types, or 0; k dimensions; the source layout, then the target
   layout, as [bplan_fn] reads them. Answer: [0] then [ueplan_fn]'s answer
   when the core took the types (they describe exactly the two layouts and
   the type planner answers), else [1] then the rounds as [put_box_rounds]
   writes them. *)
let lplan_fn a =
  let next = reader a in
  let budget = next () in
  if budget > max_elements then raise (Bad_input "a budget of more than 2^50 elements");
  let m = read_mesh next in
  let types = match next () with
    | 0 -> None
    | 1 -> let t = read_type next in let t' = read_type next in Some (t, t')
    | _ -> raise (Bad_input "unknown types tag") in
  let k = next () in
  let srcs = read_layout next k in let tgts = read_layout next k in
  let buf = Buffer.create () in
  (match lplan budget m types srcs tgts with
   | ByTypes (t, t', out) -> Buffer.add_int buf 0; put_eplanned buf ubound ureport_fields m t t' out
   | ByBoxes rs -> Buffer.add_int buf 1; put_box_rounds buf rs);
  finish buf

(* Exceptions become a message for the C side, never a crash: [Core_error]
   carries the message itself (stubs.c reads it by the name "vs_error"). *)
exception Core_error of string

let () = Callback.register_exception "vs_error" (Core_error "")

(* The heap's bound. An OCaml heap that cannot grow ends the process
   ("Fatal error: out of memory", from inside a minor collection, where no
   exception can be raised), so a call stops before: memprof samples about
   one word in 10^4 allocated, and at a call's first sample and then once
   the major heap has grown by [look_every] bytes since the last look, the
   glue asks the system how much the process may still obtain ([room],
   bindings/stubs.c: the address-space limit, the machine's available
   memory, the memory cgroup).
   With less than a quarter of the heap (its next growth: 15% by default,
   and up to [look_every] more until the next look) plus [reserve] bytes
   (the answer's copy into Python) left, it raises [Heap_full], which
   unwinds the call; the heap is then compacted (what the call built is
   garbage) and the caller gets a LimitError. A sample between looks costs
   a few instructions. *)
external room : unit -> int = "vs_room"

exception Heap_full of int * int   (* heap bytes, bytes left to the process *)

let look_every = 64 lsl 20
let reserve = 256 lsl 20
(* heap bytes at the last look; [- look_every] at the start of each call, so
   that a call's first sample looks: a process with less than [look_every]
   left would otherwise fill it before the first look, and abort. Only
   inside a call's [guard] (samples also fall on the arguments' copy, made
   before it, where [Heap_full] would escape). *)
let looked_at = ref 0
let in_call = ref false

let heap_bytes () = (Gc.quick_stat ()).Gc.heap_words * (Sys.word_size / 8)

(* The minor heap: a call that runs long enough to end a major GC cycle
   (planners over 2^16 devices and more) gets a 32 MiB one for the rest of
   the call, and the default again when it returns. With the default 2 MiB
   heap such calls spend most of their time promoting short-lived values:
   cross-mesh at 2^20 devices 12.5 s -> 6.1 s, about linear from 2^18 on.
   Small calls never end a cycle and keep the default (no memory added). *)
let default_minor = (Gc.get ()).Gc.minor_heap_size
let large_minor = 4 * 1024 * 1024   (* words *)
let grown = ref false

(* Resizing the minor heap allocates a new one: only with room for it and
   the heap's reserve (a process near its limit keeps the default), and
   where the allocation fails all the same the size in place stays (an
   exception from the alarm or from [restore_minor]'s [finally] would
   replace the call's own answer). *)
let _ = Gc.create_alarm (fun () ->
  if not !grown && room () >= 4 * large_minor * (Sys.word_size / 8) + reserve then
    try Gc.set { (Gc.get ()) with Gc.minor_heap_size = large_minor }; grown := true with Out_of_memory -> ())

let restore_minor () =
  if !grown then
    try Gc.set { (Gc.get ()) with Gc.minor_heap_size = default_minor }; grown := false with Out_of_memory -> ()

let watch_heap _ =
  let h = heap_bytes () in
  if !in_call && h >= !looked_at + look_every then begin
    let left = room () in
    if left < h / 4 + reserve then raise (Heap_full (h, left));
    looked_at := h
  end;
  None

let () =
  Gc.Memprof.start ~sampling_rate:1e-4 ~callstack_size:0
    { Gc.Memprof.null_tracker with alloc_minor = watch_heap; alloc_major = watch_heap }

let mib n = n lsr 20

(* What a call's exception becomes for the caller; the heap is no longer
   watched (the compaction and the message allocate too). *)
let core_error_of e =
  in_call := false;
  match e with
  | Bad_input msg -> Core_error ("bad input to the verified core: " ^ msg)
  | Stack_overflow -> Core_error "input too large for the verified core"
  | Heap_full (h, left) ->
      (try Gc.compact () with Out_of_memory -> ());
      Core_error (Printf.sprintf
        "problem too large for this process's memory: the verified core's heap reached %d MiB with %d MiB \
         left to the process (address-space limit, available memory, memory cgroup); stopped before the \
         heap could not grow" (mib h) (mib left))
  | Out_of_memory ->
      (try Gc.compact () with Out_of_memory -> ());
      Core_error "problem too large for this process's memory: out of memory in the verified core"
  | e -> e

let guard f a =
  let run () = try f a with e -> raise (core_error_of e) in
  looked_at := - look_every;
  in_call := true;
  Fun.protect ~finally:(fun () -> in_call := false; restore_minor ()) run

let () =
  Callback.register "vs_check" (guard check_fn);
  Callback.register "vs_plan" (guard plan_fn);
  Callback.register "vs_eplan" (guard eplan_fn);
  Callback.register "vs_echeck" (guard echeck_fn);
  Callback.register "vs_ueplan" (guard ueplan_fn);
  Callback.register "vs_uecheck" (guard uecheck_fn);
  Callback.register "vs_pcheck" (guard pcheck_fn);
  Callback.register "vs_pplan" (guard pplan_fn);
  Callback.register "vs_ucheck" (guard ucheck_fn);
  Callback.register "vs_uplan" (guard uplan_fn);
  Callback.register "vs_umovement" (guard umovement_fn);
  Callback.register "vs_lower_bound" (guard lower_bound_fn);
  Callback.register "vs_certify" (guard certify_fn);
  Callback.register "vs_ulower_bound" (guard ulower_bound_fn);
  Callback.register "vs_xplan" (guard xplan_fn);
  Callback.register "vs_xrounds" (guard xrounds_fn);
  Callback.register "vs_wplan" (guard wplan_fn);
  Callback.register "vs_xrank" (guard xrank_fn);
  Callback.register "vs_rank_rounds" (guard rank_rounds_fn);
  Callback.register "vs_bplan" (guard bplan_fn);
  Callback.register "vs_bcovers" (guard bcovers_fn);
  Callback.register "vs_lplan" (guard lplan_fn);
  Callback.register "vs_synthesize" (guard synthesize_fn);
  Callback.register "vs_blocks" (guard blocks_fn);
  Callback.register "vs_permute" (guard permute_fn);
  Callback.register "vs_movement" (guard movement_fn);
  Callback.register "vs_mplan" (guard mplan_fn);
  Callback.register "vs_pucheck" (guard pucheck_fn);
  Callback.register "vs_puplan_checked" (guard puplan_checked_fn)
