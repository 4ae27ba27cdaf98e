
(** val negb : bool -> bool **)

let negb = function
| true -> false
| false -> true

(** val fst : ('a1 * 'a2) -> 'a1 **)

let fst = function
| (x, _) -> x

(** val snd : ('a1 * 'a2) -> 'a2 **)

let snd = function
| (_, y) -> y

(** val length : 'a1 list -> int **)

let rec length = function
| [] -> 0
| _ :: l' -> Stdlib.Int.succ (length l')

(** val app : 'a1 list -> 'a1 list -> 'a1 list **)

let rec app l m =
  match l with
  | [] -> m
  | a :: l1 -> a :: (app l1 m)

(** val sub : int -> int -> int **)

let rec sub = fun n m -> Stdlib.max 0 (n - m)

module Nat =
 struct
  (** val sub : int -> int -> int **)

  let rec sub = fun n m -> Stdlib.max 0 (n - m)

  (** val divmod : int -> int -> int -> int -> int * int **)

  let rec divmod x y q u =
    (fun fO fS n -> if n=0 then fO () else fS (n-1))
      (fun _ -> (q, u))
      (fun x' ->
      (fun fO fS n -> if n=0 then fO () else fS (n-1))
        (fun _ -> divmod x' y (Stdlib.Int.succ q) y)
        (fun u' -> divmod x' y q u')
        u)
      x

  (** val div : int -> int -> int **)

  let div = fun n m -> if m = 0 then 0 else n / m

  (** val modulo : int -> int -> int **)

  let modulo = fun n m -> if m = 0 then n else n mod m

  (** val eq_dec : int -> int -> bool **)

  let rec eq_dec = fun n m -> n = m
 end

(** val nth : int -> 'a1 list -> 'a1 -> 'a1 **)

let rec nth n l default =
  (fun fO fS n -> if n=0 then fO () else fS (n-1))
    (fun _ -> match l with
              | [] -> default
              | x :: _ -> x)
    (fun m -> match l with
              | [] -> default
              | _ :: t -> nth m t default)
    n

(** val nth_error : 'a1 list -> int -> 'a1 option **)

let rec nth_error l n =
  (fun fO fS n -> if n=0 then fO () else fS (n-1))
    (fun _ -> match l with
              | [] -> None
              | x :: _ -> Some x)
    (fun n0 -> match l with
               | [] -> None
               | _ :: l0 -> nth_error l0 n0)
    n

(** val last : 'a1 list -> 'a1 -> 'a1 **)

let rec last l d =
  match l with
  | [] -> d
  | a :: l0 -> (match l0 with
                | [] -> a
                | _ :: _ -> last l0 d)

(** val rev : 'a1 list -> 'a1 list **)

let rec rev = function
| [] -> []
| x :: l' -> app (rev l') (x :: [])

(** val list_eq_dec : ('a1 -> 'a1 -> bool) -> 'a1 list -> 'a1 list -> bool **)

let rec list_eq_dec eq_dec0 l l' =
  match l with
  | [] -> (match l' with
           | [] -> true
           | _ :: _ -> false)
  | y :: l0 ->
    (match l' with
     | [] -> false
     | a :: l1 -> if eq_dec0 y a then list_eq_dec eq_dec0 l0 l1 else false)

(** val map : ('a1 -> 'a2) -> 'a1 list -> 'a2 list **)

let rec map f = function
| [] -> []
| a :: t -> (f a) :: (map f t)

(** val flat_map : ('a1 -> 'a2 list) -> 'a1 list -> 'a2 list **)

let rec flat_map f = function
| [] -> []
| x :: t -> app (f x) (flat_map f t)

(** val fold_left : ('a1 -> 'a2 -> 'a1) -> 'a2 list -> 'a1 -> 'a1 **)

let rec fold_left f l a0 =
  match l with
  | [] -> a0
  | b :: t -> fold_left f t (f a0 b)

(** val fold_right : ('a2 -> 'a1 -> 'a1) -> 'a1 -> 'a2 list -> 'a1 **)

let rec fold_right f a0 = function
| [] -> a0
| b :: t -> f b (fold_right f a0 t)

(** val existsb : ('a1 -> bool) -> 'a1 list -> bool **)

let rec existsb f = function
| [] -> false
| a :: l0 -> (||) (f a) (existsb f l0)

(** val forallb : ('a1 -> bool) -> 'a1 list -> bool **)

let rec forallb f = function
| [] -> true
| a :: l0 -> (&&) (f a) (forallb f l0)

(** val filter : ('a1 -> bool) -> 'a1 list -> 'a1 list **)

let rec filter f = function
| [] -> []
| x :: l0 -> if f x then x :: (filter f l0) else filter f l0

(** val find : ('a1 -> bool) -> 'a1 list -> 'a1 option **)

let rec find f = function
| [] -> None
| x :: tl -> if f x then Some x else find f tl

(** val combine : 'a1 list -> 'a2 list -> ('a1 * 'a2) list **)

let rec combine l l' =
  match l with
  | [] -> []
  | x :: tl ->
    (match l' with
     | [] -> []
     | y :: tl' -> (x, y) :: (combine tl tl'))

(** val firstn : int -> 'a1 list -> 'a1 list **)

let rec firstn n l =
  (fun fO fS n -> if n=0 then fO () else fS (n-1))
    (fun _ -> [])
    (fun n0 -> match l with
               | [] -> []
               | a :: l0 -> a :: (firstn n0 l0))
    n

(** val skipn : int -> 'a1 list -> 'a1 list **)

let rec skipn n l =
  (fun fO fS n -> if n=0 then fO () else fS (n-1))
    (fun _ -> l)
    (fun n0 -> match l with
               | [] -> []
               | _ :: l0 -> skipn n0 l0)
    n

(** val seq : int -> int -> int list **)

let rec seq start len =
  (fun fO fS n -> if n=0 then fO () else fS (n-1))
    (fun _ -> [])
    (fun len0 -> start :: (seq (Stdlib.Int.succ start) len0))
    len

(** val prod0 : int list -> int **)

let prod0 l =
  fold_right ( * ) (Stdlib.Int.succ 0) l

(** val upd : (int -> 'a1) -> int -> 'a1 -> int -> 'a1 **)

let upd f a v b =
  if (=) b a then v else f b

(** val set_nth : 'a1 list -> int -> 'a1 -> 'a1 list **)

let rec set_nth l n x =
  match l with
  | [] -> []
  | h :: t ->
    ((fun fO fS n -> if n=0 then fO () else fS (n-1))
       (fun _ -> x :: t)
       (fun n0 -> h :: (set_nth t n0 x))
       n)

(** val nat_list_eqb : int list -> int list -> bool **)

let nat_list_eqb a b =
  if list_eq_dec Nat.eq_dec a b then true else false

(** val memb : int -> int list -> bool **)

let memb x l =
  existsb ((=) x) l

(** val nodupb : int list -> bool **)

let rec nodupb = function
| [] -> true
| x :: t -> (&&) (negb (memb x t)) (nodupb t)

type ('e, 'a) result =
| Ok of 'a
| Err of 'e

type mesh = int list

(** val asize : mesh -> int -> int **)

let asize m a =
  nth a m (Stdlib.Int.succ 0)

(** val wf_meshb : mesh -> bool **)

let wf_meshb m =
  forallb (fun n -> (<) 0 n) m

(** val nprod : mesh -> int list -> int **)

let nprod m a =
  prod0 (map (asize m) a)

type coords = int -> int

(** val mr : mesh -> int list -> coords -> int **)

let mr m a c =
  fold_left (fun acc a0 -> (+) (( * ) acc (asize m a0)) (c a0)) a 0

(** val set_digits_rev : mesh -> int list -> coords -> int -> coords **)

let rec set_digits_rev m rA c k =
  match rA with
  | [] -> c
  | a :: rA' ->
    set_digits_rev m rA' (upd c a (Nat.modulo k (asize m a)))
      (Nat.div k (asize m a))

(** val set_digits : mesh -> int list -> coords -> int -> coords **)

let set_digits m a c k =
  set_digits_rev m (rev a) c k

(** val all_axes : mesh -> int list **)

let all_axes m =
  seq 0 (length m)

(** val ndevices : mesh -> int **)

let ndevices =
  prod0

(** val rank : mesh -> coords -> int **)

let rank m c =
  mr m (all_axes m) c

(** val coords_of_rank : mesh -> int -> coords **)

let coords_of_rank m r =
  set_digits m (all_axes m) (fun _ -> 0) r

type dim = { axes : int list; gsize : int }

type atype = dim list

(** val lsize : mesh -> dim -> int **)

let lsize m d =
  Nat.div d.gsize (nprod m d.axes)

(** val size : mesh -> atype -> int **)

let size m t =
  prod0 (map (lsize m) t)

(** val used : atype -> int list **)

let used t =
  flat_map (fun d -> d.axes) t

(** val wf_dimb : mesh -> dim -> bool **)

let wf_dimb m d =
  (&&) ((&&) ((<) 0 d.gsize) (forallb (fun a -> (<) a (length m)) d.axes))
    ((=) (Nat.modulo d.gsize (nprod m d.axes)) 0)

(** val wfb : mesh -> atype -> bool **)

let wfb m t =
  (&&) ((&&) (wf_meshb m) (forallb (wf_dimb m) t)) (nodupb (used t))

(** val block : mesh -> dim -> coords -> int **)

let block m d c =
  mr m d.axes c

(** val blocks : mesh -> atype -> coords -> int list **)

let blocks m t c =
  map (fun d -> block m d c) t

(** val gidx : mesh -> dim -> coords -> int -> int **)

let gidx m d c k =
  (+) (( * ) (block m d c) (lsize m d)) k

(** val block_starts : mesh -> atype -> int list **)

let block_starts m t =
  flat_map (fun r -> map (fun d -> gidx m d (coords_of_rank m r) 0) t)
    (seq 0 (ndevices m))

type coll =
| AllGather of int * int list
| DynSlice of int * int list
| AllToAll of int * int * int list
| AllPermute of atype

type error =
| BadDim of int
| NoAxes
| NotMinorAxes
| AxisOutOfRange of int
| RepeatedAxis
| AxisInUse of int
| NotDivisible
| SameDim
| BadTarget
| ShapeChanged
| BadMesh
| BadSource
| BadDest
| GlobalShapeMismatch
| WrongResult

(** val strip_suffix : int list -> int list -> int list option **)

let strip_suffix xs a =
  let k = sub (length a) (length xs) in
  if (&&) ((<=) (length xs) (length a)) (nat_list_eqb (skipn k a) xs)
  then Some (firstn k a)
  else None

(** val same_shape : mesh -> atype -> atype -> bool **)

let same_shape m t t' =
  (&&) (nat_list_eqb (map (fun d -> d.gsize) t') (map (fun d -> d.gsize) t))
    (nat_list_eqb (map (lsize m) t') (map (lsize m) t))

(** val apply : mesh -> atype -> coll -> (error, atype) result **)

let apply m t = function
| AllGather (d, xs) ->
  (match nth_error t d with
   | Some d0 ->
     (match xs with
      | [] -> Err NoAxes
      | _ :: _ ->
        (match strip_suffix xs d0.axes with
         | Some p -> Ok (set_nth t d { axes = p; gsize = d0.gsize })
         | None -> Err NotMinorAxes))
   | None -> Err (BadDim d))
| DynSlice (d, xs) ->
  (match nth_error t d with
   | Some d0 ->
     (match xs with
      | [] -> Err NoAxes
      | _ :: _ ->
        (match find (fun a -> (<=) (length m) a) xs with
         | Some a -> Err (AxisOutOfRange a)
         | None ->
           if negb (nodupb xs)
           then Err RepeatedAxis
           else (match find (fun a -> memb a (used t)) xs with
                 | Some a -> Err (AxisInUse a)
                 | None ->
                   if (=) (Nat.modulo (lsize m d0) (nprod m xs)) 0
                   then Ok
                          (set_nth t d { axes = (app d0.axes xs); gsize =
                            d0.gsize })
                   else Err NotDivisible)))
   | None -> Err (BadDim d))
| AllToAll (d, e, xs) ->
  if (=) d e
  then Err SameDim
  else (match nth_error t d with
        | Some d0 ->
          (match nth_error t e with
           | Some e0 ->
             (match xs with
              | [] -> Err NoAxes
              | _ :: _ ->
                (match strip_suffix xs d0.axes with
                 | Some p ->
                   if (=) (Nat.modulo (lsize m e0) (nprod m xs)) 0
                   then Ok
                          (set_nth
                            (set_nth t d { axes = p; gsize = d0.gsize }) e
                            { axes = (app e0.axes xs); gsize = e0.gsize })
                   else Err NotDivisible
                 | None -> Err NotMinorAxes))
           | None -> Err (BadDim e))
        | None -> Err (BadDim d))
| AllPermute t' ->
  if negb (wfb m t')
  then Err BadTarget
  else if same_shape m t t' then Ok t' else Err ShapeChanged

type plan = coll list

(** val moves : mesh -> atype -> atype -> bool **)

let moves m t t' =
  existsb (fun r ->
    negb
      (nat_list_eqb (blocks m t (coords_of_rank m r))
        (blocks m t' (coords_of_rank m r)))) (seq 0 (ndevices m))

(** val recv : mesh -> atype -> coll -> atype -> int **)

let recv m t c t' =
  match c with
  | AllGather (_, xs) ->
    ( * ) (sub (nprod m xs) (Stdlib.Int.succ 0)) (size m t)
  | DynSlice (_, _) -> 0
  | AllToAll (_, _, xs) -> sub (size m t) (Nat.div (size m t) (nprod m xs))
  | AllPermute _ -> if moves m t t' then size m t else 0

(** val peak_of : mesh -> atype list -> int **)

let peak_of m ts =
  fold_right (fun t acc -> Stdlib.max (size m t) acc) 0 ts

(** val dim_eq_dec : dim -> dim -> bool **)

let dim_eq_dec x y =
  let { axes = axes0; gsize = gsize0 } = x in
  let { axes = axes1; gsize = gsize1 } = y in
  if list_eq_dec Nat.eq_dec axes0 axes1
  then Nat.eq_dec gsize0 gsize1
  else false

(** val atype_eqb : atype -> atype -> bool **)

let atype_eqb t t' =
  if list_eq_dec dim_eq_dec t t' then true else false

(** val run :
    mesh -> atype -> plan -> int -> (int * error, atype list * int list)
    result **)

let rec run m t p i =
  match p with
  | [] -> Ok ((t :: []), [])
  | c :: p' ->
    (match apply m t c with
     | Ok t1 ->
       (match run m t1 p' (Stdlib.Int.succ i) with
        | Ok p0 ->
          let (ts, rs) = p0 in Ok ((t :: ts), ((recv m t c t1) :: rs))
        | Err x -> Err x)
     | Err e -> Err (i, e))

type report = { types : atype list; peak : int; received : int list }

(** val check :
    mesh -> atype -> atype -> plan -> (int * error, report) result **)

let check m src dst p =
  if negb (wf_meshb m)
  then Err (0, BadMesh)
  else if negb (wfb m src)
       then Err (0, BadSource)
       else if negb (wfb m dst)
            then Err (0, BadDest)
            else if negb
                      (nat_list_eqb (map (fun d -> d.gsize) src)
                        (map (fun d -> d.gsize) dst))
                 then Err (0, GlobalShapeMismatch)
                 else (match run m src p (Stdlib.Int.succ 0) with
                       | Ok p0 ->
                         let (ts, rs) = p0 in
                         if atype_eqb (last ts src) dst
                         then Ok { types = ts; peak = (peak_of m ts);
                                received = rs }
                         else Err ((length p), WrongResult)
                       | Err x -> Err x)

(** val replicated : mesh -> atype -> int list **)

let replicated m t =
  filter (fun a -> negb (memb a (used t))) (all_axes m)

(** val gained : mesh -> atype -> atype -> int list **)

let gained m t t' =
  filter (fun a -> memb a (used t')) (replicated m t)

(** val perm_src : mesh -> atype -> atype -> coords -> coords **)

let perm_src m t t' c =
  let x = gained m t t' in
  let y = gained m t' t in
  let n = nprod m x in
  let b = set_digits m (used t) c (mr m (used t') c) in
  set_digits m x b
    (Nat.modulo ((+) (sub ((+) (mr m y c) n) (mr m y b)) (mr m x c)) n)

(** val permute_table : mesh -> atype -> atype -> int list **)

let permute_table m t t' =
  map (fun r -> rank m (perm_src m t t' (coords_of_rank m r)))
    (seq 0 (ndevices m))

(** val dflt : dim **)

let dflt =
  { axes = []; gsize = (Stdlib.Int.succ 0) }

(** val source :
    mesh -> atype -> coll -> atype -> coords -> int list -> coords * int list **)

let source m t op t' c i =
  match op with
  | AllGather (d, xs) ->
    let l = lsize m (nth d t dflt) in
    let k = nth d i 0 in
    ((set_digits m xs c (Nat.div k l)), (set_nth i d (Nat.modulo k l)))
  | DynSlice (d, xs) ->
    let l' = lsize m (nth d t' dflt) in
    (c, (set_nth i d ((+) (( * ) (mr m xs c) l') (nth d i 0))))
  | AllToAll (d, e, xs) ->
    let l = lsize m (nth d t dflt) in
    let le' = lsize m (nth e t' dflt) in
    let k = nth d i 0 in
    ((set_digits m xs c (Nat.div k l)),
    (set_nth (set_nth i d (Nat.modulo k l)) e
      ((+) (( * ) (mr m xs c) le') (nth e i 0))))
  | AllPermute _ -> ((perm_src m t t' c), i)

(** val row_major : int list -> int list list **)

let rec row_major = function
| [] -> [] :: []
| n :: rest ->
  flat_map (fun k -> map (fun x -> k :: x) (row_major rest)) (seq 0 n)

(** val offset : int list -> int list -> int **)

let rec offset shape i =
  match shape with
  | [] -> 0
  | _ :: rest ->
    (match i with
     | [] -> 0
     | k :: i' -> (+) (( * ) k (prod0 rest)) (offset rest i'))

(** val movement : mesh -> atype -> coll -> atype -> int list **)

let movement m t op t' =
  flat_map (fun r ->
    flat_map (fun i ->
      let (c', i') = source m t op t' (coords_of_rank m r) i in
      (rank m c') :: ((offset (map (lsize m) t) i') :: []))
      (row_major (map (lsize m) t'))) (seq 0 (ndevices m))

(** val naive : mesh -> atype -> atype -> plan **)

let naive _ src dst =
  app
    (flat_map (fun dD ->
      match (snd dD).axes with
      | [] -> []
      | n :: l -> (AllGather ((fst dD), (n :: l))) :: [])
      (combine (seq 0 (length src)) src))
    (flat_map (fun dD ->
      match (snd dD).axes with
      | [] -> []
      | n :: l -> (DynSlice ((fst dD), (n :: l))) :: [])
      (combine (seq 0 (length dst)) dst))

(** val synthesize : mesh -> atype -> atype -> bool * plan **)

let synthesize m src dst =
  (false, (naive m src dst))
